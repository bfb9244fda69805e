package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redsem/redsem/limiter"
)

const usage = `usage:
  redsem [flags] ls [PATTERN]        semaphores and rate limits under the prefix whose names
                                     match PATTERN, a Redis glob (* ? [a-z] [^x] \x) on the
                                     name (default *)
  redsem [flags] show NAME           a semaphore's limit, holders and wait queue, and the
                                     fleet rate, next free time and pause of its name
  redsem [flags] why NAME [ID]       why the waiter ID (a WAIT ID of show) waits and when it
                                     should be granted; without ID, a request made now
  redsem [flags] watch NAME          show, live, until Ctrl-C: redrawn in place on a
                                     terminal, a line per change when piped
  redsem [flags] limit NAME [N]      read the fleet-wide limit, or set it to N; N=0 clears it
  redsem [flags] rate NAME [RATE [BURST]]
                                     read the fleet-wide rate, or set it to RATE events per
                                     period (100/1m, 5/s) with BURST at once (default 1);
                                     RATE=off clears it
  redsem [flags] pause NAME DURATION NAME (its permits and rates) grants nothing for DURATION (30s,
                                     5m; at most 24h), in every process; a longer pause stands
  redsem [flags] unpause NAME        lift NAME's pause
  redsem [flags] release NAME ID     force-release the lease with id ID; its
                                     holder learns of the loss at its next refresh
  redsem [flags] serve               a live dashboard in the browser (and /metrics), on
                                     -listen, read-only unless -actions, until Ctrl-C
  redsem [flags] doctor              check that Redis keeps the limiter's promises:
                                     eviction, persistence, version, ACL, slots,
                                     replicas, clocks, restart quarantine

flags (before or after the command; -- ends them):
  -json              print JSON for scripts (watch: one object a line, per change)
  -addr HOST:PORT    Redis server (default localhost:6379, or $REDIS_URL when
                     neither -addr nor -cluster is given)
  -cluster A,B,...   Redis Cluster seed addresses
  -user NAME         ACL user name
  -password PASS     password (default $REDIS_PASSWORD)
  -tls               use TLS (rediss:// implies it)
  -tls-ca FILE       PEM CA certificates to trust (implies -tls)
  -tls-insecure      skip server certificate verification (implies -tls)
  -prefix P          key prefix of the limiter Clients (default "redsem:")
  -timeout D         bound on the whole command; for watch, on each poll; for
                     serve, on connecting and on each sample's reads (default 10s)
  -interval D        watch: time between polls (default 500ms); serve: between
                     samples, 50ms to 90s (default 1s)
  -listen HOST:PORT  serve: where the dashboard listens (default 127.0.0.1:7380;
                     it shows who holds what: keep it off public networks)
  -actions           serve: let the pages release leases, set limits and rates,
                     pause and unpause, with the token
  -token T           serve: the actions' token, at least 8 characters (default
                     $REDSEM_TOKEN)
  -redlock A,B,...   doctor: check these independent nodes (a Redlock quorum)
  -wait-replicas N   doctor: the WaitReplicas n of your Clients (default 0)
  -ttl D             doctor: the longest TTL of your Clients, which is the
                     restart quarantine (default 10s)

LIMIT is the fleet limit set with the limit command (for a rate limit, the
fleet rate set with the rate command); "-" means none is set and each
process uses the one its code gives, which redsem cannot see. NEXT FREE is
when an event may go by the fleet rate ("-": no fleet rate, so it depends on
each process's own). PAUSED is how long the name stays paused (its semaphore
and its rate limit alike).
exit status: 0 ok (watch: also when ended by SIGINT or SIGTERM; doctor: also
with warnings), 1 error (doctor: a check found one), 2 usage
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// usageError is a mistake in the command line or environment: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// errNoCommand makes run print the usage to standard error.
var errNoCommand = usageError{"no command given"}

// options are the parsed flags.
type options struct {
	conn     connOptions
	prefix   string
	timeout  time.Duration
	interval time.Duration
	json     bool
	tty      bool // standard output is a terminal: set by run, not a flag
	doctor   doctorOptions
	serve    serveOptions
	where    string // where the Client connects, for messages: set by execute
}

// action is one command, its arguments checked, waiting for a Client.
type action struct {
	run func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error
	// direct connects by itself (doctor: to each node), within -timeout.
	direct func(ctx context.Context, w io.Writer, o options, getenv func(string) string) error
	// live runs until SIGINT or SIGTERM, which end it with exit status 0;
	// -timeout bounds the connection and each read instead of the whole.
	live bool
}

// run is the whole command: it returns the exit status.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	o, act, err := parse(args)
	if err == nil {
		o.serve, err = o.serve.withEnv(getenv)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.Is(err, errNoCommand):
		fmt.Fprint(stderr, usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "redsem: %v\n(redsem -h for help)\n", err)
		return 2
	}
	o.tty = isTerminal(stdout)
	if err := execute(o, act, stdout, getenv); err != nil {
		fmt.Fprintf(stderr, "redsem: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) || errors.Is(err, limiter.ErrInvalidArgument) {
			return 2
		}
		return 1
	}
	return 0
}

// parse reads the flags and the command; help (-h, or the help command)
// is flag.ErrHelp.
func parse(args []string) (options, action, error) {
	var o options
	fs := flag.NewFlagSet("redsem", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the errors and the usage
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.StringVar(&o.conn.addr, "addr", "localhost:6379", "Redis server")
	fs.StringVar(&o.conn.cluster, "cluster", "", "Redis Cluster seed addresses")
	fs.StringVar(&o.conn.user, "user", "", "ACL user")
	fs.StringVar(&o.conn.password, "password", "", "password")
	fs.BoolVar(&o.conn.tls, "tls", false, "use TLS")
	fs.StringVar(&o.conn.tlsCA, "tls-ca", "", "CA certificates")
	fs.BoolVar(&o.conn.tlsInsecure, "tls-insecure", false, "skip verification")
	fs.StringVar(&o.prefix, "prefix", limiter.DefaultPrefix, "key prefix")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on the command")
	fs.DurationVar(&o.interval, "interval", 500*time.Millisecond, "watch: time between polls")
	fs.StringVar(&o.serve.listen, "listen", "127.0.0.1:7380", "serve: listen address")
	fs.BoolVar(&o.serve.actions, "actions", false, "serve: actions on")
	fs.StringVar(&o.serve.token, "token", "", "serve: the actions' token")
	fs.StringVar(&o.doctor.redlock, "redlock", "", "doctor: independent nodes")
	fs.IntVar(&o.doctor.waitReplicas, "wait-replicas", 0, "doctor: WaitReplicas n")
	fs.DurationVar(&o.doctor.ttl, "ttl", limiter.DefaultTTL, "doctor: the longest TTL")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return o, action{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "addr":
			o.conn.addrSet = true
		case "password":
			o.conn.passwordSet = true
		case "interval":
			o.serve.intervalSet = true
		}
	})
	if o.timeout <= 0 {
		return o, action{}, usagef("-timeout must be > 0")
	}
	if o.interval <= 0 {
		return o, action{}, usagef("-interval must be > 0")
	}
	if err := o.doctor.check(o.conn); err != nil {
		return o, action{}, err
	}
	if len(pos) == 0 {
		return o, action{}, errNoCommand
	}
	act, err := command(pos[0], pos[1:])
	if err == nil && pos[0] == "serve" && o.serve.intervalSet {
		err = checkServeInterval(o.interval)
	}
	return o, act, err
}

// parseInterspersed lets flags follow the command and its arguments, as
// operators type them (redsem ls -json): the flag package stops at the
// first argument that is not a flag. After "--" every argument is
// positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// runFunc is a command that runs on a Client.
type runFunc = func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error

// simple is the action of a command that runs once on a Client.
func simple(run runFunc) action { return action{run: run} }

// checkArgs checks that args are between lo and hi, none empty; what
// names them for the usage line ("NAME [N]"), and a missing one by its
// word of what.
func checkArgs(name string, args []string, lo, hi int, what string) error {
	if words := strings.Fields(what); len(args) < lo && len(args) < len(words) {
		return usagef("usage: redsem %s %s: %s is missing", name, what, strings.Trim(words[len(args)], "[]"))
	}
	if len(args) < lo || len(args) > hi {
		return usagef("usage: redsem %s %s", name, what)
	}
	for _, a := range args {
		if a == "" {
			return usagef("%s: empty argument", name)
		}
	}
	return nil
}

// command checks a command's arguments, before anything is sent to Redis.
func command(name string, args []string) (action, error) {
	do := func(run runFunc) (action, error) { return simple(run), nil }
	nargs := func(lo, hi int, what string) error { return checkArgs(name, args, lo, hi, what) }
	switch name {
	case "help":
		return action{}, flag.ErrHelp
	case "ls":
		if err := nargs(0, 1, "[PATTERN]"); err != nil {
			return action{}, err
		}
		pattern := ""
		if len(args) == 1 {
			pattern = args[0]
		}
		return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return ls(ctx, w, c, pattern, o.json)
		})
	case "show":
		if err := nargs(1, 1, "NAME"); err != nil {
			return action{}, err
		}
		return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return show(ctx, w, c, args[0], o.json)
		})
	case "why":
		if err := nargs(1, 2, "NAME [ID]"); err != nil {
			return action{}, err
		}
		id := ""
		if len(args) == 2 {
			id = args[1]
		}
		return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return why(ctx, w, c, args[0], id, o.json)
		})
	case "watch":
		if err := nargs(1, 1, "NAME"); err != nil {
			return action{}, err
		}
		return action{live: true, run: func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return watch(ctx, w, c, args[0], watchOptions{tty: o.tty, json: o.json, interval: o.interval, timeout: o.timeout})
		}}, nil
	case "limit":
		if err := nargs(1, 2, "NAME [N]"); err != nil {
			return action{}, err
		}
		if len(args) == 1 {
			return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
				return readLimit(ctx, w, c, args[0], o.json)
			})
		}
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || n < 0 {
			return action{}, usagef("limit: N must be a whole number >= 0 (0 clears the fleet limit), not %q", args[1])
		}
		return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return setLimit(ctx, w, c, args[0], n, o.json)
		})
	case "rate":
		return rateCommand(args)
	case "pause":
		return pauseCommand(args)
	case "unpause":
		return unpauseCommand(args)
	case "serve":
		if err := nargs(0, 0, ""); err != nil {
			return action{}, err
		}
		return action{live: true, run: serve}, nil
	case "doctor":
		if err := nargs(0, 0, ""); err != nil {
			return action{}, err
		}
		return action{direct: doctor}, nil
	case "release":
		if err := nargs(2, 2, "NAME ID"); err != nil {
			return action{}, err
		}
		return do(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return release(ctx, w, c, args[0], args[1], o.json)
		})
	}
	return action{}, usagef("unknown command %q", name)
}

// execute connects, runs act within -timeout, and disconnects.
func execute(o options, act action, w io.Writer, getenv func(string) string) error {
	if act.direct != nil {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		return withTimeout(ctx, act.direct(ctx, w, o, getenv), o.timeout)
	}
	rdb, where, err := o.conn.client(getenv)
	if err != nil {
		return err
	}
	o.where = where
	defer rdb.Close()
	c, err := limiter.New(rdb, limiter.Prefix(o.prefix))
	if err != nil {
		return usagef("-prefix: %v", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(ctx) // it holds nothing: nothing to give back
	}()

	base := context.Background()
	if act.live {
		var stop context.CancelFunc
		base, stop = signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(base, o.timeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		if base.Err() != nil { // a signal: the operator gave up waiting
			return nil
		}
		return withTimeout(ctx, fmt.Errorf("cannot connect to Redis at %s: %w", where, err), o.timeout)
	}
	if act.live {
		ctx = base // the action bounds its own reads
	}
	return withTimeout(ctx, act.run(ctx, w, c, o), o.timeout)
}

// withTimeout says so when -timeout ended the command.
func withTimeout(ctx context.Context, err error, d time.Duration) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (gave up after -timeout %v)", err, d)
	}
	return err
}
