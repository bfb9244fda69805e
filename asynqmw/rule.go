package asynqmw

import (
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// DefaultMaxWait is how long a gated task waits for a permit before it is
// re-queued, when its rule does not say.
const DefaultMaxWait = 5 * time.Second

// Rule maps tasks to a semaphore. A task is gated by the first rule that
// matches it; tasks no rule matches run ungated.
type Rule struct {
	// Name names the semaphore (required). Rules may share a name only
	// with the same Limit: they then share the permits.
	Name string
	// Type matches tasks of exactly this type; TypePrefix, tasks whose
	// type starts with it. At most one of them; with neither, the rule
	// matches every task (Key may still decline).
	Type       string
	TypePrefix string
	// Key, when set, gives every key its own semaphore of Limit permits,
	// named Name+":"+key: per-customer caps from a payload field or a
	// header. A task for which it returns ok == false is not gated by
	// this rule (the next rule may match).
	Key func(t *asynq.Task) (key string, ok bool)
	// Limit is the number of permits (required, >= 1).
	Limit int64
	// Weight is the permits one task takes (default 1, <= Limit).
	Weight int64
	// TTL bounds how long a crashed worker keeps its permit (default
	// limiter.DefaultTTL). The lease is refreshed while the handler runs.
	TTL time.Duration
	// MaxWait is how long a task waits for a permit before it is
	// re-queued (default DefaultMaxWait).
	MaxWait time.Duration
}

func (r Rule) matches(t *asynq.Task) (name string, ok bool) {
	switch {
	case r.Type != "" && t.Type() != r.Type:
		return "", false
	case r.TypePrefix != "" && !strings.HasPrefix(t.Type(), r.TypePrefix):
		return "", false
	case r.Key == nil:
		return r.Name, true
	}
	key, ok := r.Key(t)
	if !ok {
		return "", false
	}
	return r.Name + ":" + key, true
}

// ConfigError names the rule and the field of it that is wrong.
type ConfigError struct {
	Rule   int // index in the rules; -1 for the list itself
	Field  string
	Reason string
}

// Error says which rule and field are wrong and why.
func (e *ConfigError) Error() string {
	if e.Rule < 0 {
		return "asynqmw: " + e.Reason
	}
	return fmt.Sprintf("asynqmw: rule %d: %s %s", e.Rule, e.Field, e.Reason)
}

// Is makes errors.Is(err, limiter.ErrInvalidArgument) true.
func (e *ConfigError) Is(target error) bool { return target == limiter.ErrInvalidArgument }

func validate(rules []Rule) ([]Rule, error) {
	if len(rules) == 0 {
		return nil, &ConfigError{Rule: -1, Reason: "no rules"}
	}
	out := make([]Rule, len(rules))
	limits := map[string]int64{}
	for i, r := range rules {
		bad := func(field, reason string) error { return &ConfigError{Rule: i, Field: field, Reason: reason} }
		switch {
		case r.Name == "":
			return nil, bad("Name", "must not be empty")
		case r.Type != "" && r.TypePrefix != "":
			return nil, bad("Type", "and TypePrefix are exclusive")
		case r.Limit < 1:
			return nil, bad("Limit", fmt.Sprintf("%d must be >= 1", r.Limit))
		case r.Weight < 0 || r.Weight > r.Limit:
			return nil, bad("Weight", fmt.Sprintf("%d must be between 1 and Limit %d", r.Weight, r.Limit))
		case r.TTL < 0:
			return nil, bad("TTL", "must not be negative")
		case r.MaxWait < 0:
			return nil, bad("MaxWait", "must not be negative")
		}
		if l, seen := limits[r.Name]; seen && l != r.Limit {
			return nil, bad("Limit", fmt.Sprintf("%d differs from %d of another rule named %q", r.Limit, l, r.Name))
		}
		limits[r.Name] = r.Limit
		if r.Weight == 0 {
			r.Weight = 1
		}
		if r.TTL == 0 {
			r.TTL = limiter.DefaultTTL
		}
		if r.MaxWait == 0 {
			r.MaxWait = DefaultMaxWait
		}
		out[i] = r
	}
	return out, nil
}
