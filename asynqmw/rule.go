package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// defaultAcquireTimeout is a Rule's AcquireTimeout when it does not say:
// half the limiter's, since a waiting task holds an asynq worker slot.
const defaultAcquireTimeout = 5 * time.Second

// defaultTTL is a Rule's TTL when it does not say: short, since it is
// also how long a restarted Redis runs no task (the restart quarantine),
// and a handler's lease is kept alive in bulk, one call per name and
// process every TTL/3.
const defaultTTL = 3 * time.Second

// Rule maps tasks to a semaphore, a rate limit, or both. Every rule that
// matches a task applies: the task runs only within a rate slot of each
// rule with a Rate and while it holds a permit of each rule with a Limit
// (see New for the order). Tasks no rule matches run ungated.
type Rule struct {
	// Name names the semaphore and the rate limit (required). Rules may
	// share a name only with the same Limit and Rate: they then share the
	// permits and the rate, and a task that several of them match takes
	// the permit and the slot once (with the first such rule's Weight,
	// TTL and AcquireTimeout).
	Name string
	// Type matches tasks of exactly this type; TypePrefix, tasks whose
	// type starts with it. At most one of them; with neither, the rule
	// matches every type.
	Type       string
	TypePrefix string
	// Queue, when set, matches only tasks pulled from this asynq queue.
	Queue string
	// Key, when set, gives every key its own semaphore of Limit permits
	// (or KeyLimit's) and its own rate limit of Rate, both named
	// Name+":"+key: per-customer caps from a payload field or a header. ctx is the handler's (asynq.GetQueueName
	// and the other asynq.Get* work on it). A task for which it returns
	// ok == false is not gated by this rule (other rules still apply).
	Key func(ctx context.Context, t *asynq.Task) (key string, ok bool)
	// KeyLimit, with Key, gives each key's limit; 0 means Limit. A value
	// below 0, or below the rule's Weight, fails the task with an error
	// wrapping a *limiter.ArgumentError naming rules[i].KeyLimit (asynq
	// retries it as any error).
	KeyLimit func(key string) int64
	// Limit is the number of permits: >= 1, or 0 for a rule with a Rate
	// and no semaphore.
	Limit int64
	// Weight is the permits one task takes (default 1, <= Limit; 0
	// without a Limit).
	Weight int64
	// Rate, when not zero, is a fleet-wide rate limit (limiter.RateLimit)
	// on the handlers' starts: each run of a task spends one event of it
	// ("10/s burst 5" is limiter.Rate{Events: 10, Per: time.Second,
	// Burst: 5}). Its wait counts in AcquireTimeout; a rate stored with
	// inspect.Inspector.SetRate overrides it; a pause
	// (inspect.Inspector.Pause, or a handler's PauseError) stops it, as
	// it stops the rule's semaphore (with or without a Rate). A
	// bad rate makes New return a *limiter.ArgumentError naming
	// rules[i].Rate; a Redlock client, limiter.ErrRatesUnsupported.
	Rate limiter.Rate
	// TTL bounds how long a crashed worker keeps its permit, and how
	// long a Redis that restarted empty grants none (the restart
	// quarantine; default 3s). The lease is refreshed every TTL/3 while
	// the handler runs: one call per name and process each time.
	TTL time.Duration
	// AcquireTimeout bounds how long a task waits for this rule's permit
	// and rate slot before it returns a *BusyError and is re-queued
	// (default 5s; 0 means the default, not an unbounded wait as for
	// limiter.AcquireTimeout). A rule's bound does not cut another rule's
	// wait short: a task matched by several rules waits for each at most
	// its own AcquireTimeout. The last try has its own bound
	// (LastTryAcquireTimeout), and MaxGated bounds the time across runs.
	AcquireTimeout time.Duration
}

// rule is a validated Rule with its place in the acquisition order.
type rule struct {
	Rule
	index    int                  // in the rules given to New
	order    int                  // index of the first rule with the same Name
	semOpts  []limiter.NameOption // of its semaphores, set by New
	rateOpts []limiter.NameOption // of its rate limits, set by New
}

// hasRate reports whether the rule limits a rate.
func (r *rule) hasRate() bool { return r.Rate != (limiter.Rate{}) }

// gate is one semaphore and rate limit a task must hold a permit and a
// slot of: the rule's, or its key's.
type gate struct {
	r     *rule
	name  string // the semaphore's and rate's name: Name, or Name:key
	limit int64  // 0: no semaphore (a rule with only a Rate)
	// bound is how long the task waits for this gate's permit and slot
	// (the rule's AcquireTimeout); 0 on the last try, where the task's
	// wait (LastTryAcquireTimeout) alone bounds every gate.
	bound time.Duration
}

func (r *rule) match(ctx context.Context, t *asynq.Task) (gate, bool, error) {
	switch {
	case r.Type != "" && t.Type() != r.Type:
		return gate{}, false, nil
	case r.TypePrefix != "" && !strings.HasPrefix(t.Type(), r.TypePrefix):
		return gate{}, false, nil
	case r.Queue != "":
		if q, _ := asynq.GetQueueName(ctx); q != r.Queue {
			return gate{}, false, nil
		}
	}
	if r.Key == nil {
		return gate{r: r, name: r.Name, limit: r.Limit, bound: r.AcquireTimeout}, true, nil
	}
	key, ok := r.Key(ctx, t)
	if !ok {
		return gate{}, false, nil
	}
	limit := r.Limit
	if r.KeyLimit != nil { // validate made sure that Limit >= 1
		if l := r.KeyLimit(key); l != 0 {
			limit = l
		}
		if limit < 1 || limit < r.Weight {
			return gate{}, false, fmt.Errorf("asynqmw: %w", ruleError(r.index, "KeyLimit", limit,
				fmt.Sprintf("for key %q: must be >= 1 and >= Weight %d", key, r.Weight)))
		}
	}
	return gate{r: r, name: r.Name + ":" + key, limit: limit, bound: r.AcquireTimeout}, true, nil
}

// ruleError names field of the i-th rule as a *limiter.ArgumentError.
func ruleError(i int, field string, value any, reason string) error {
	return &limiter.ArgumentError{Arg: fmt.Sprintf("rules[%d].%s", i, field), Value: value, Reason: reason}
}

func validate(rules []Rule) ([]*rule, error) {
	if len(rules) == 0 {
		return nil, &limiter.ArgumentError{Arg: "rules", Value: rules, Reason: "must not be empty"}
	}
	out := make([]*rule, len(rules))
	limits := map[string]int64{}
	rates := map[string]limiter.Rate{}
	first := map[string]int{}
	for i, r := range rules {
		switch {
		case r.Name == "":
			return nil, ruleError(i, "Name", `""`, "must not be empty")
		case r.Type != "" && r.TypePrefix != "":
			return nil, ruleError(i, "Type", r.Type, fmt.Sprintf("and TypePrefix %q are exclusive", r.TypePrefix))
		case r.Limit < 0 || r.Limit == 0 && r.Rate == (limiter.Rate{}):
			return nil, ruleError(i, "Limit", r.Limit, "must be >= 1, or 0 in a rule with a Rate")
		case r.Weight < 0 || r.Weight > r.Limit:
			return nil, ruleError(i, "Weight", r.Weight, fmt.Sprintf("must be between 1 and Limit %d (0 without a Limit)", r.Limit))
		case r.KeyLimit != nil && r.Limit == 0:
			return nil, ruleError(i, "Limit", r.Limit, "must be >= 1 when KeyLimit is set")
		case r.TTL < 0:
			return nil, ruleError(i, "TTL", r.TTL, "must not be negative")
		case r.AcquireTimeout < 0:
			return nil, ruleError(i, "AcquireTimeout", r.AcquireTimeout, "must not be negative")
		case r.KeyLimit != nil && r.Key == nil:
			return nil, ruleError(i, "Key", nil, "must be set when KeyLimit is")
		}
		if err := validRate(i, r.Rate); err != nil {
			return nil, err
		}
		if l, seen := limits[r.Name]; seen && l != r.Limit {
			return nil, ruleError(i, "Limit", r.Limit, fmt.Sprintf("differs from %d of another rule named %q", l, r.Name))
		}
		if rt, seen := rates[r.Name]; seen && rt != r.Rate {
			return nil, ruleError(i, "Rate", r.Rate, fmt.Sprintf("differs from %v of another rule named %q", rt, r.Name))
		}
		limits[r.Name], rates[r.Name] = r.Limit, r.Rate
		if _, seen := first[r.Name]; !seen {
			first[r.Name] = i
		}
		if r.Weight == 0 && r.Limit > 0 {
			r.Weight = 1
		}
		if r.TTL == 0 {
			r.TTL = defaultTTL
		}
		if r.AcquireTimeout == 0 {
			r.AcquireTimeout = defaultAcquireTimeout
		}
		out[i] = &rule{Rule: r, index: i, order: first[r.Name]}
	}
	// A keyed rule's semaphores are Name:key: no other rule may name one.
	for _, k := range out {
		if k.Key == nil {
			continue
		}
		for _, r := range out {
			if strings.HasPrefix(r.Name, k.Name+":") {
				return nil, ruleError(r.index, "Name", r.Name,
					fmt.Sprintf("would share a semaphore or rate with the keys of rule %d (%q)", k.index, k.Name))
			}
		}
	}
	return out, nil
}

// validRate checks the i-th rule's Rate (limiter.Rate.Validate), if it
// has one, naming the field: the limiter's "rate.Burst" is
// rules[i].Rate.Burst.
func validRate(i int, rt limiter.Rate) error {
	if rt == (limiter.Rate{}) {
		return nil
	}
	err := rt.Validate()
	var arg *limiter.ArgumentError
	if errors.As(err, &arg) {
		return ruleError(i, "Rate"+strings.TrimPrefix(arg.Arg, "rate"), arg.Value, arg.Reason)
	}
	return err
}
