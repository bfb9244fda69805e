package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	xrate "golang.org/x/time/rate"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
)

// fleetEnv carries a fleet worker's fleetWorkerConfig (JSON): the bench
// binary, started again in that role.
const fleetEnv = "REDSEM_BENCH_FLEET_WORKER"

// fleetTaskType is the type of every fleet task.
const fleetTaskType = "partner:call"

// fleetWorkerConfig is what a fleet worker process is told.
type fleetWorkerConfig struct {
	Proc        int
	Procs       int
	Variant     string // fleetRedsem, fleetXRate, fleetLocal
	AsynqAddr   string // asynq's queue (never restarted)
	LimiterAddr string // the limits' state (fresh, restarted)
	API         string // the fake API's base URL
	Concurrency int
	Limit       int64   // fleet-wide calls at once
	PerCustomer int64   // calls at once per customer
	Rate        float64 // fleet-wide starts a second
	Burst       int64   // the rate's burst (redsem's and redis_rate's)
}

// fleetPayload is a task's payload.
type fleetPayload struct {
	Customer string `json:"c"`
	Enqueued int64  `json:"e"` // Unix ns
	Index    int    `json:"i"`
}

// fleetReport is what a worker counts of its handlers' returns.
type fleetReport struct {
	Proc int `json:"proc"`
	// Runs: handler invocations (the middleware's included).
	Runs int64 `json:"runs"`
	OK   int64 `json:"ok"`
	// Busy re-queues: redsem's *BusyError (Busy: a permit; Rate: a rate
	// slot too far; Parked; Paused: the rule paused, or this task's 429
	// paused it), the recipes' RateLimitError (SemaBusy: a semaphore
	// token; RateBusy: the rate).
	Busy, Rate, Parked, Paused int64
	SemaBusy, RateBusy         int64
	// Polls: the polling variant's tries again in its handler (not
	// re-queues).
	Polls int64 `json:"polls"`
	// TooMany: 429s this worker's handlers got.
	TooMany int64 `json:"tooMany"`
	// Failed: any other error (asynq counts a retry); FirstErr the first.
	Failed   int64  `json:"failed"`
	FirstErr string `json:"firstErr,omitempty"`
	Err      string `json:"err,omitempty"`
	// Sent: commands sent to the limiter's Redis (a go-redis hook).
	Sent int64 `json:"sent"`
	// SentBy: Sent by command, an FCALL by function and rule (cmdLabel).
	SentBy map[string]int64 `json:"sentBy,omitempty"`
}

// IsFleetWorker says whether this process is a fleet worker.
func IsFleetWorker() bool { return os.Getenv(fleetEnv) != "" }

// FleetWorkerMain runs a fleet worker: it reads its config, prints
// "ready", starts its asynq server on "go", shuts it down on "stop" (or
// the end of stdin) and prints its report as one JSON line.
func FleetWorkerMain() int {
	var cfg fleetWorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(fleetEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet worker: bad", fleetEnv, err)
		return 2
	}
	rep, err := runFleetWorker(cfg, os.Stdin, os.Stdout)
	if err != nil {
		rep.Err = err.Error()
	}
	if jerr := json.NewEncoder(os.Stdout).Encode(rep); jerr != nil {
		fmt.Fprintln(os.Stderr, "fleet worker:", jerr)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet worker:", err)
		return 1
	}
	return 0
}

// errTooManyRequests is a 429 from the fake API; retryAfter its header.
type tooManyError struct{ retryAfter time.Duration }

func (e *tooManyError) Error() string {
	return fmt.Sprintf("partner API: 429 Too Many Requests (Retry-After %v)", e.retryAfter)
}

// RateLimitError is the asynq wiki's "Rate limiting" recipe's error: the
// handler returns it when a limit says no, IsFailure does not count it
// and RetryDelayFunc re-queues the task after RetryIn.
type RateLimitError struct {
	RetryIn time.Duration
	Sema    bool  // a semaphore said no (else the rate, or a 429)
	Err     error // a 429, or nil
}

func (e *RateLimitError) Unwrap() error { return e.Err }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited (retry in  %v)", e.RetryIn)
}

// IsRateLimitError is the recipe's: a *RateLimitError.
func IsRateLimitError(err error) bool {
	var rl *RateLimitError
	return errors.As(err, &rl)
}

// recipeRetryDelay is the recipe's RetryDelayFunc.
func recipeRetryDelay(n int, err error, task *asynq.Task) time.Duration {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return rl.RetryIn
	}
	return asynq.DefaultRetryDelayFunc(n, err, task)
}

// callAPI makes the task's one call.
func callAPI(ctx context.Context, hc *http.Client, base string, p fleetPayload, id string) error {
	q := url.Values{"c": {p.Customer}, "t": {id}, "e": {strconv.FormatInt(p.Enqueued, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/call?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return &tooManyError{retryAfter: time.Duration(max(secs, 1)) * time.Second}
	default:
		return fmt.Errorf("partner API: %s", resp.Status)
	}
}

func runFleetWorker(cfg fleetWorkerConfig, in io.Reader, out io.Writer) (rep fleetReport, err error) {
	rep.Proc = cfg.Proc
	var counts struct {
		runs, ok, busy, rate, parked, paused, semaBusy, rateBusy, polls, tooMany, failed atomic.Int64
	}
	var firstErr sync.Once
	var sent atomic.Int64 // commands sent to the limiter's Redis
	var sentBy cmdCounts
	defer func() {
		rep.Runs, rep.OK = counts.runs.Load(), counts.ok.Load()
		rep.Busy, rep.Rate, rep.Parked, rep.Paused = counts.busy.Load(), counts.rate.Load(), counts.parked.Load(), counts.paused.Load()
		rep.SemaBusy, rep.RateBusy = counts.semaBusy.Load(), counts.rateBusy.Load()
		rep.Polls = counts.polls.Load()
		rep.TooMany, rep.Failed = counts.tooMany.Load(), counts.failed.Load()
		rep.Sent = sent.Load()
		rep.SentBy = sentBy.snapshot()
	}()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Concurrency}, Timeout: 10 * time.Second}
	asynqRDB := redis.NewClient(&redis.Options{Addr: cfg.AsynqAddr, ContextTimeoutEnabled: true})
	defer asynqRDB.Close()
	limRDB := redis.NewClient(&redis.Options{Addr: cfg.LimiterAddr, ContextTimeoutEnabled: true})
	defer limRDB.Close()
	limRDB.AddHook(countHook{&sent})
	limRDB.AddHook(labelHook{&sentBy})

	call := func(ctx context.Context, t *asynq.Task) (fleetPayload, string, error) {
		var p fleetPayload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return p, "", fmt.Errorf("payload: %w", err)
		}
		id, _ := asynq.GetTaskID(ctx)
		return p, id, callAPI(ctx, hc, cfg.API, p, id)
	}
	// recipeCall is the recipes' call: a 429 re-queues that task alone
	// for its Retry-After (nothing tells the other workers).
	recipeCall := func(ctx context.Context, t *asynq.Task) error {
		_, _, err := call(ctx, t)
		var tm *tooManyError
		if errors.As(err, &tm) {
			return &RateLimitError{RetryIn: tm.retryAfter, Err: err}
		}
		return err
	}
	// count is the outermost middleware: it sees what asynq sees.
	count := func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			counts.runs.Add(1)
			err := next.ProcessTask(ctx, t)
			var busy *asynqmw.BusyError
			var rl *RateLimitError
			var tm *tooManyError
			switch {
			case err == nil:
				counts.ok.Add(1)
			case errors.As(err, &busy):
				if errors.As(err, &tm) {
					counts.tooMany.Add(1)
				}
				switch {
				case busy.Parked:
					counts.parked.Add(1)
				case busy.Paused:
					counts.paused.Add(1)
				case busy.Rate:
					counts.rate.Add(1)
				default:
					counts.busy.Add(1)
				}
			case errors.As(err, &rl):
				if errors.As(err, &tm) {
					counts.tooMany.Add(1)
				}
				switch {
				case tm != nil:
				case rl.Sema:
					counts.semaBusy.Add(1)
				default:
					counts.rateBusy.Add(1)
				}
			default:
				if errors.As(err, &tm) {
					counts.tooMany.Add(1)
				}
				counts.failed.Add(1)
				firstErr.Do(func() { rep.FirstErr = err.Error() })
			}
			return err
		})
	}

	mux := asynq.NewServeMux()
	mux.Use(count)
	srvCfg := asynq.Config{
		Concurrency: cfg.Concurrency,
		// As examples/worker: a re-queued task is due again within 200ms
		// (asynq's default checks every 5s), for every variant alike.
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
		ShutdownTimeout:          2 * time.Second,
		LogLevel:                 asynq.FatalLevel,
	}
	var cleanup []func()
	defer func() {
		for _, f := range cleanup {
			f()
		}
	}()

	switch cfg.Variant {
	case fleetRedsem:
		// As asynqmw's docs and examples/worker: one limiter Client per
		// process, the narrowest rule first, Park on asynq's Redis, the
		// server's IsFailure and RetryDelay, and a 429 pauses the
		// fleet-wide rule for its Retry-After.
		lc, err := limiter.New(limRDB)
		if err != nil {
			return rep, err
		}
		cleanup = append(cleanup, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = lc.Close(ctx)
		})
		mw, err := asynqmw.New(lc, []asynqmw.Rule{
			{Name: "partner-customer", TypePrefix: "partner:", Key: fleetCustomerOf, Limit: cfg.PerCustomer},
			{Name: "partner-api", TypePrefix: "partner:", Limit: cfg.Limit,
				Rate: limiter.Rate{Events: int64(cfg.Rate), Per: time.Second, Burst: cfg.Burst}},
		}, asynqmw.Park(asynqRDB), asynqmw.Logger(slog.New(slog.DiscardHandler)),
			// The rate as configured is the most it may learn: the
			// pushback scenario's 30/s is learned down to what the API
			// takes (its 429s, through asynqmw.Pause). The Limit is the
			// API's documented concurrency: learned too, a 429 would cut
			// it as well (the API's two limits bind together).
			asynqmw.RateOptions(limiter.Adaptive(1, int64(cfg.Rate))))
		if err != nil {
			return rep, err
		}
		mux.Use(mw)
		mux.HandleFunc(fleetTaskType, func(ctx context.Context, t *asynq.Task) error {
			_, _, err := call(ctx, t)
			var tm *tooManyError
			if errors.As(err, &tm) {
				return &asynqmw.PauseError{For: tm.retryAfter, Rule: "partner-api", Err: err}
			}
			return err
		})
		srvCfg.IsFailure = asynqmw.IsFailure(nil)
		srvCfg.RetryDelayFunc = asynqmw.RetryDelay(nil)

	case fleetXRate, fleetXRate1, fleetXPoll:
		// asynq's x/rate Semaphore for the calls at once (one fleet-wide
		// scope, one scope per customer), go-redis/redis_rate for the
		// starts a second, both on the limiter's Redis; the wiki's
		// RateLimitError with IsFailure and RetryDelayFunc re-queues a
		// task that a limit refuses. RetryIn: x/rate's example's 30s for
		// a semaphore, redis_rate's RetryAfter for the rate, the 429's
		// Retry-After for a 429 (that task only: nothing tells the other
		// workers).
		semaRetry := func() time.Duration { return xrateSemaRetry }
		if cfg.Variant == fleetXRate1 {
			semaRetry = tunedRetry
		}
		opt := asynq.RedisClientOpt{Addr: cfg.LimiterAddr}
		hook := countHook{&sent}
		global := NewXSemaphore(opt, "partner-api", int(cfg.Limit), hook)
		cleanup = append(cleanup, func() { _ = global.Close() })
		var perMu sync.Mutex
		per := map[string]*XSemaphore{}
		customerSem := func(c string) *XSemaphore {
			perMu.Lock()
			defer perMu.Unlock()
			if per[c] == nil {
				per[c] = NewXSemaphore(opt, "partner-customer:"+c, int(cfg.PerCustomer), hook)
				s := per[c]
				cleanup = append(cleanup, func() { _ = s.Close() })
			}
			return per[c]
		}
		rl := redis_rate.NewLimiter(limRDB)
		limit := redis_rate.Limit{Rate: int(cfg.Rate), Burst: int(cfg.Burst), Period: time.Second}
		poll := cfg.Variant == fleetXPoll
		mux.HandleFunc(fleetTaskType, func(ctx context.Context, t *asynq.Task) error {
			var p fleetPayload
			if err := json.Unmarshal(t.Payload(), &p); err != nil {
				return err
			}
			cs := customerSem(p.Customer)
			giveUp := time.Now().Add(pollFor)
			for _, s := range []*XSemaphore{cs, global} {
				for {
					ok, err := s.Acquire(ctx)
					if err != nil {
						return err
					}
					if ok {
						break
					}
					if !poll || time.Now().After(giveUp) {
						return &RateLimitError{RetryIn: semaRetry(), Sema: true}
					}
					counts.polls.Add(1)
					if !sleepCtx(ctx, pollEvery()) {
						return ctx.Err()
					}
				}
				defer s.Release(context.WithoutCancel(ctx))
			}
			for {
				res, err := rl.Allow(ctx, "partner-api", limit)
				if err != nil {
					return err
				}
				if res.Allowed > 0 {
					break
				}
				if !poll || time.Now().After(giveUp) {
					return &RateLimitError{RetryIn: res.RetryAfter}
				}
				counts.polls.Add(1)
				if !sleepCtx(ctx, res.RetryAfter) {
					return ctx.Err()
				}
			}
			return recipeCall(ctx, t)
		})
		srvCfg.IsFailure = func(err error) bool { return !IsRateLimitError(err) }
		srvCfg.RetryDelayFunc = recipeRetryDelay

	case fleetLocal, fleetLocal1:
		// The asynq wiki's "Rate limiting" page, per process: a
		// golang.org/x/time/rate Limiter of the fleet's rate split over
		// the processes (18/4 = 4.5/s; burst 1 like the other variants,
		// where the page's 3x-rate burst would start 4x13 calls at once),
		// and, since the page has no cap on calls at once, the per-process
		// share of the fleet's 5 rounded down to 1 (so 4 at once
		// fleet-wide: 2 each would allow 8, over the API's 5; no
		// per-customer cap, which cannot be split below 1 a process).
		// A refused task comes back after the page's rand.Intn(10)
		// seconds.
		lim := xrate.NewLimiter(xrate.Limit(cfg.Rate/float64(cfg.Procs)), 1)
		slots := make(chan struct{}, max(int(cfg.Limit)/cfg.Procs, 1))
		retryIn := func() time.Duration { return time.Duration(rand.IntN(10)) * time.Second }
		if cfg.Variant == fleetLocal1 {
			retryIn = tunedRetry
		}
		mux.HandleFunc(fleetTaskType, func(ctx context.Context, t *asynq.Task) error {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			default:
				return &RateLimitError{RetryIn: retryIn(), Sema: true}
			}
			if !lim.Allow() {
				return &RateLimitError{RetryIn: retryIn()}
			}
			return recipeCall(ctx, t)
		})
		srvCfg.IsFailure = func(err error) bool { return !IsRateLimitError(err) }
		srvCfg.RetryDelayFunc = recipeRetryDelay

	default:
		return rep, fmt.Errorf("unknown variant %q", cfg.Variant)
	}

	if err := asynqRDB.Ping(context.Background()).Err(); err != nil {
		return rep, fmt.Errorf("asynq's redis: %w", err)
	}
	sent.Store(0)
	sentBy.reset()
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return rep, err
	}
	br := bufio.NewReader(in)
	if line, err := br.ReadString('\n'); err != nil || line != "go\n" {
		return rep, fmt.Errorf("waiting for go: %q %v", line, err)
	}
	srv := asynq.NewServerFromRedisClient(asynqRDB, srvCfg)
	if err := srv.Start(mux); err != nil {
		return rep, err
	}
	_, _ = br.ReadString('\n') // "stop", or the end of stdin
	srv.Shutdown()
	return rep, nil
}

// The polling variant retries in its handler, as users of redsync's or
// redislock's retry loops do: a full semaphore every 25-75ms, a spent
// rate at redis_rate's RetryAfter, for up to pollFor, then re-queues.
const pollFor = 30 * time.Second

func pollEvery() time.Duration { return 25*time.Millisecond + rand.N(50*time.Millisecond) }

// sleepCtx sleeps d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// xrateSemaRetry is the x/rate variant's re-queue delay for a semaphore
// that said no: x/rate's example's 30s.
const xrateSemaRetry = 30 * time.Second

// tunedRetry is the "1s retry" variants' re-queue delay for any refusal
// but redis_rate's (whose RetryAfter is exact): 0.5-1.5s, the shortest
// that a user who saw the recipes' delays starve the fleet might pick.
func tunedRetry() time.Duration { return 500*time.Millisecond + rand.N(time.Second) }

// fleetCustomerOf is the per-customer rule's Key.
func fleetCustomerOf(_ context.Context, t *asynq.Task) (string, bool) {
	var p fleetPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.Customer == "" {
		return "", false
	}
	return p.Customer, true
}

const (
	fleetRedsem = "redsem"
	fleetXRate  = "x/rate+redis_rate"
	fleetXRate1 = "x/rate+redis_rate, 1s retry"
	fleetXPoll  = "x/rate+redis_rate, polling"
	fleetLocal  = "per-process x/time/rate"
	fleetLocal1 = "per-process, 1s retry"
)
