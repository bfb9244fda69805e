// Command redsem lets an operator look inside the semaphores of
// github.com/redsem/redsem/limiter and steer them: list them, show who
// holds one, set a limit the whole fleet obeys, and force-release a stuck
// lease.
//
//	go install github.com/redsem/redsem/cmd/redsem@latest
//
// Usage:
//
//	redsem [flags] ls [PATTERN]        semaphores under the prefix; PATTERN is a glob (default *)
//	redsem [flags] show NAME           a semaphore's limit and holders
//	redsem [flags] set-limit NAME N    set the fleet-wide limit; N=0 clears it
//	redsem [flags] release NAME ID     force-release the lease with id ID
//
// Flags may come before or after the command and its arguments; "--" ends
// them, for names that start with '-'.
//
//	-json              print JSON for scripts instead of text
//	-addr HOST:PORT    Redis server (default localhost:6379)
//	-cluster A,B,...   Redis Cluster seed addresses (instead of -addr)
//	-user NAME         ACL user name
//	-password PASS     password (default $REDIS_PASSWORD; prefer the variable,
//	                   a flag shows in the process list)
//	-tls               connect with TLS (rediss:// in REDIS_URL implies it)
//	-tls-ca FILE       PEM file of CA certificates to trust (implies -tls)
//	-tls-insecure      do not verify the server's certificate (implies -tls)
//	-prefix P          key prefix of the limiter Clients (default "redsem:")
//	-timeout D         bound on the whole command (default 10s)
//
// Without -addr or -cluster, REDIS_URL (redis://[user:pass@]host:port/db
// or rediss://…, as redis.ParseURL reads it) says where Redis is. -user
// and -password override what the URL says; REDIS_PASSWORD is used when
// neither gives a password.
//
// The LIMIT that ls and show print is the fleet limit stored in Redis by
// set-limit (Semaphore.SetLimit), which overrides every process's own
// limit. When none is set they print "-": each process then checks
// acquisitions against the limit its code passed to Client.Semaphore,
// which is not stored in Redis, so redsem cannot know it. IN USE is the
// sum of the holders' weights (permits). Holders are listed oldest grant
// first, with their fencing token and the time left before they expire
// unless refreshed.
//
// set-limit never evicts holders: when the new limit is below the permits
// in use, holders keep them and new grants wait until the permits in use
// fit.
//
// release removes the lease by its current fencing token, as Redis lists
// it, and frees its permits for the next waiter at once. The holding
// process is not told: it learns of the loss at its next refresh (by
// default within a third of its TTL), when its Lease ends with
// limiter.ErrLeaseLost. Until then it may still act as the holder; only
// resources that check fencing tokens are protected.
//
// Exit status: 0 success; 1 an error (Redis unreachable or failing, no
// lease with that id); 2 a usage error (unknown command, wrong arguments,
// bad flag, unreadable REDIS_URL or -tls-ca). Errors go to standard error.
package main
