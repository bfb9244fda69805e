package asynqmw

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redsem/redsem/limiter/inspect"
)

// maxPause is the limiter's bound on a pause (inspect.Inspector.Pause).
const maxPause = 24 * time.Hour

// pauseTimeout bounds the call that sets a pause, which does not use the
// handler's context: asynq may have cancelled it by then.
const pauseTimeout = time.Second

// PauseError is what a handler returns to stop its rule's calls for every
// worker process for a while: the partner answered 429 with a
// Retry-After, or asked to back off. New's middleware pauses, in Redis,
// every rule of the task (of the task's key, for a Key rule), whether it
// has a Rate, a Limit or both, or only the rule named Rule, for For
// (inspect.Inspector.Overload: the name's semaphore grants no worker a new
// permit and its rate gives no task a slot before the pause ends; waiting
// tasks are served in order from then on, and a rate paces them with no
// burst; a rate or limit learned with limiter.Adaptive, in
// LimiterOptions, RateOptions or SemaphoreOptions, is cut too, once per
// episode). The task is then re-queued at the pause's end without spending
// a retry: it returns a *BusyError with Paused set, wrapping the
// PauseError.
//
// A PauseError that names a Rule none of the task's rules has pauses
// nothing in Redis, is re-queued after For all the same, and the mistake
// is logged. If Redis cannot be told (within 1s), the failure is logged
// and the task re-queued after For: only it waits. A pause never shortens
// a longer one already set. On a task's last try asynq archives it
// whatever it returns; the pause is set all the same. With MaxGated,
// pauses count as gated time. Returned other than through the middleware,
// it is a failure like any error.
type PauseError struct {
	// For is how long to pause, clamped to [100ms, 24h].
	For time.Duration
	// Rule names the rule to pause; "" pauses every rule of the task.
	Rule string
	// Err says why (e.g. the 429); Unwrap returns it. It may be nil.
	Err error
}

// Pause returns a *PauseError that pauses every rule of the task for d, with err as the reason (nil for none): return it from a handler,
// e.g. on a 429 with its Retry-After.
func Pause(d time.Duration, err error) error { return &PauseError{For: d, Err: err} }

// Error says for how long, and why.
func (e *PauseError) Error() string {
	msg := fmt.Sprintf("asynqmw: pause for %v", e.For)
	if e.Rule != "" {
		msg = fmt.Sprintf("asynqmw: pause rule %s for %v", e.Rule, e.For)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Err.
func (e *PauseError) Unwrap() error { return e.Err }

// pause sets pe's pause on the task's gates it names and returns the
// *BusyError that re-queues the task at the pause's end (the longest, if
// one was paused longer already).
func (m *middleware) pause(ctx context.Context, t *asynq.Task, gs []gate, pe *PauseError) *BusyError {
	d := min(max(pe.For, minRetryIn), maxPause)
	busy := &BusyError{RetryIn: d, Paused: true, Err: pe}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	var names []string
	for _, g := range gs {
		if pe.Rule != "" && pe.Rule != g.r.Name {
			continue
		}
		names = append(names, g.name)
		left, err := inspect.New(m.client).Overload(ctx, g.name, d)
		if err != nil {
			m.opts.logger.Warn("asynqmw: pause not set: only this task waits", "task", t.Type(), "name", g.name, "err", err)
			continue
		}
		m.opts.metrics.paused(g.r.Name)
		busy.RetryIn = max(busy.RetryIn, left)
	}
	if len(names) == 0 {
		m.opts.logger.Warn("asynqmw: a handler asked for a pause, but no rule of its task matches it: nothing paused",
			"task", t.Type(), "rule", pe.Rule)
		names = []string{"task " + t.Type()}
	}
	busy.Semaphore = strings.Join(names, ", ")
	return busy
}
