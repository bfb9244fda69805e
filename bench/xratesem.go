package main

// A copy of asynq's x/rate Semaphore (github.com/hibiken/asynq/x/rate,
// semaphore.go at asynq's master of 2026-05, MIT License, Copyright (c)
// 2019 Kentaro Hibino), for the fleet benchmark's "x/rate" variant. The
// module github.com/hibiken/asynq/x has no release that builds with asynq
// v0.26 (the module proxy's newest, of 2021, uses go-redis v8, whose
// client asynq v0.26's RedisConnOpt does not make), and the package
// imports asynq's internal/context for the task id: here asynq.GetTaskID
// stands in for it. The script and the calls are unchanged.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// NewXSemaphore is x/rate's NewSemaphore: a counting semaphore of
// maxTokens for scope, on the Redis rco names; hooks (the bench's
// command count) are added to its client.
func NewXSemaphore(rco asynq.RedisConnOpt, scope string, maxTokens int, hooks ...redis.Hook) *XSemaphore {
	rc, ok := rco.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		panic(fmt.Sprintf("rate.NewSemaphore: unsupported RedisConnOpt type %T", rco))
	}
	for _, h := range hooks {
		rc.AddHook(h)
	}
	if maxTokens < 1 {
		panic("rate.NewSemaphore: maxTokens cannot be less than 1")
	}
	if len(strings.TrimSpace(scope)) == 0 {
		panic("rate.NewSemaphore: scope should not be empty")
	}
	return &XSemaphore{rc: rc, scope: scope, maxTokens: maxTokens}
}

// XSemaphore is x/rate's Semaphore.
type XSemaphore struct {
	rc        redis.UniversalClient
	maxTokens int
	scope     string
}

// KEYS[1] -> asynq:sema:<scope>
// ARGV[1] -> max concurrency
// ARGV[2] -> current time in unix time
// ARGV[3] -> deadline in unix time
// ARGV[4] -> task ID
var xAcquireCmd = redis.NewScript(`
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", tonumber(ARGV[2])-1)
local count = redis.call("ZCARD", KEYS[1])

if (count < tonumber(ARGV[1])) then
     redis.call("ZADD", KEYS[1], ARGV[3], ARGV[4])
     return 'true'
else
     return 'false'
end
`)

// Acquire tries once: (true, nil) with a token, (false, nil) without.
// ctx must have a deadline (the token's expiry) and an asynq task id.
func (s *XSemaphore) Acquire(ctx context.Context) (bool, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return false, fmt.Errorf("provided context must have a deadline")
	}
	taskID, ok := asynq.GetTaskID(ctx)
	if !ok {
		return false, fmt.Errorf("provided context is missing task ID value")
	}
	return xAcquireCmd.Run(ctx, s.rc,
		[]string{xSemaphoreKey(s.scope)},
		s.maxTokens,
		time.Now().Unix(),
		d.Unix(),
		taskID,
	).Bool()
}

// Release gives the task's token back.
func (s *XSemaphore) Release(ctx context.Context) error {
	taskID, ok := asynq.GetTaskID(ctx)
	if !ok {
		return fmt.Errorf("provided context is missing task ID value")
	}
	n, err := s.rc.ZRem(ctx, xSemaphoreKey(s.scope), taskID).Result()
	if err != nil {
		return fmt.Errorf("redis command failed: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("no token found for task %q", taskID)
	}
	return nil
}

// Close closes the semaphore's own Redis client.
func (s *XSemaphore) Close() error { return s.rc.Close() }

func xSemaphoreKey(scope string) string { return "asynq:sema:" + scope }
