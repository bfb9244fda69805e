// Command redsem lets an operator look inside the semaphores and rate
// limits of github.com/redsem/redsem/limiter and steer them: list them,
// show who holds one and who waits for it and why, watch it live, read or set a
// limit or a rate the whole fleet obeys, pause a name, force-release
// a stuck lease, see it all live in a browser (serve), and check that a
// Redis deployment keeps the limiter's promises (doctor).
//
//	go install github.com/redsem/redsem/cmd/redsem@latest
//
// Usage:
//
//	redsem [flags] ls [PATTERN]        names under the prefix matching a glob (default *)
//	redsem [flags] show NAME           limit, holders and wait queue; the rate and pause
//	redsem [flags] why NAME [ID]       why waiter ID (or a request made now) waits, and when
//	redsem [flags] watch NAME          show, live, until Ctrl-C
//	redsem [flags] limit NAME [N]      read the fleet-wide limit, or set it to N; N=0 clears it
//	redsem [flags] rate NAME [RATE [BURST]]
//	                                   read the fleet-wide rate, or set it; RATE=off clears it
//	redsem [flags] pause NAME DURATION NAME (its permits and rates) grants nothing for DURATION
//	redsem [flags] unpause NAME        lift NAME's pause
//	redsem [flags] release NAME ID     force-release the lease with id ID
//	redsem [flags] serve               a live dashboard in the browser, and /metrics
//	redsem [flags] doctor              check Redis against the limiter's promises
//
// Flags may come before or after the command and its arguments; "--" ends
// them. redsem -h lists them all: -json for scripts; -addr, -cluster,
// -user, -password, -tls, -tls-ca, -tls-insecure and -prefix to connect;
// -timeout (default 10s); -interval for watch and serve; -listen,
// -actions and -token for serve; -redlock, -wait-replicas and -ttl for
// doctor.
//
// Without -addr or -cluster, REDIS_URL (redis://… or rediss://…, as
// redis.ParseURL reads it) says where Redis is. -user and -password
// override what the URL says; REDIS_PASSWORD is used when neither gives a
// password. serve's token defaults to $REDSEM_TOKEN.
//
// A LIMIT of "-" means no fleet limit (or rate) is stored in Redis: each
// process then uses the one its code passed, which redsem cannot know.
// release frees the permits at once, but the holder learns of the loss
// only at its next refresh (limiter.ErrLeaseLost); until then only
// resources that check fencing tokens are protected.
//
// Exit status: 0 success (doctor: no error found, warnings allowed); 1 an
// error (Redis unreachable or failing, no lease with that id; doctor: a
// check found an error); 2 a usage error. Errors go to standard error.
//
// docs/cli.md is the operator's guide to every command, with examples;
// docs/cli.md ("Reference") has the details of the output, -json,
// watch, rate and pause arguments, and each doctor check.
package main
