package scheduler_test

import (
	"errors"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/scheduler"
)

func TestBadJobs(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer client.Close()
	lc := redistest.Limiter(t, rdb)
	s, err := scheduler.New(lc, client)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]scheduler.Job{
		"no name":            {Spec: "@every 1s", TaskType: "x"},
		"no type":            {Name: "a", Spec: "@every 1s"},
		"bad spec":           {Name: "a", Spec: "every second", TaskType: "x"},
		"bad limit":          {Name: "a", Spec: "@every 1s", TaskType: "x", Limit: -1},
		"bad TTL":            {Name: "a", Spec: "@every 1s", TaskType: "x", TTL: -1},
		"bad limiter option": {Name: "a", Spec: "@every 1s", TaskType: "x"},
	}
	for name, job := range cases {
		s := s
		if name == "bad limiter option" {
			s, _ = scheduler.New(lc, client, scheduler.LimiterOptions(limiter.ClockDrift(0.9)))
		}
		if err := s.Register(job); !errors.Is(err, limiter.ErrInvalidArgument) {
			t.Errorf("%s: want an invalid-argument error, got %v", name, err)
		}
	}
	var arg *limiter.ArgumentError
	if _, err := scheduler.New(lc, nil); !errors.As(err, &arg) || arg.Arg != "client" {
		t.Errorf("nil asynq client: %v", err)
	}
	if _, err := scheduler.New(nil, client); !errors.As(err, &arg) || arg.Arg != "lc" {
		t.Errorf("nil limiter client: %v", err)
	}
	if _, err := scheduler.Adopt(nil); !errors.As(err, &arg) || arg.Arg != "lc" {
		t.Errorf("nil limiter client in Adopt: %v", err)
	}
	if _, err := scheduler.Adopt(lc, scheduler.WorkerTTL(-1)); !errors.As(err, &arg) || arg.Arg != "TTL" {
		t.Errorf("bad WorkerTTL: %v", err)
	}
}
