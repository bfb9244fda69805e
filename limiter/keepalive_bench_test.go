package limiter_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// BenchmarkKeepAlive100Names measures what one Client's keep-alive costs
// Redis while it holds a lease in each of 100 names (TTL 3s: a refresh
// round every second): the server's CPU time in commands (INFO
// commandstats) and its script calls, per second. Each iteration is one
// second of keep-alive; run it with -benchtime=20x or more. Nothing else
// runs on the server, so every command counted is the keep-alive's.
func BenchmarkKeepAlive100Names(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	c, err := limiter.New(rdb, limiter.TTL(3*time.Second), limiter.RestartQuarantine(0))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	for i := range 100 {
		sem, err := c.Semaphore(fmt.Sprintf("keepalive-%d", i), 5)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sem.TryAcquire(ctx); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // past the first refreshes and records
	usec0, calls0 := commandCost(b, rdb)
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	secs := time.Since(start).Seconds()
	usec1, calls1 := commandCost(b, rdb)
	// INFO itself is counted once on each side: the difference cancels it.
	b.ReportMetric(float64(usec1-usec0)/secs, "redis-µs/s")
	b.ReportMetric(float64(calls1-calls0)/secs, "scripts/s")
}

// BenchmarkRecordUses100Names is the Redis cost of one record of the
// limits a Client uses in 100 names (one call of uses.lua on a single
// server), which the keep-alive adds every 10s: compare its redis-µs/op
// with BenchmarkKeepAlive100Names's redis-µs/s over 100 (one refresh
// call). Timing the record alone keeps the ratio out of the noise of a
// shared machine, which moves the keep-alive's total by ±15%.
func BenchmarkRecordUses100Names(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	c, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	old := limiter.SetUsePeriod(time.Hour) // only the records this makes
	defer limiter.SetUsePeriod(old)
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("keepalive-%d", i)
	}
	limiter.RecordUses(c, names, 5) // loads the function
	usec0, calls0 := commandCost(b, rdb)
	b.ResetTimer()
	for range b.N {
		limiter.RecordUses(c, names, 5)
	}
	b.StopTimer()
	usec1, calls1 := commandCost(b, rdb)
	b.ReportMetric(float64(usec1-usec0)/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(calls1-calls0)/float64(b.N), "scripts/op")
}

// commandCost sums, over INFO commandstats, the µs Redis spent in every
// command, and counts the script calls (FCALL, EVALSHA, EVAL).
func commandCost(b *testing.B, rdb *redis.Client) (usec, scripts int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case k == "usec":
				usec += n
			case k == "calls" && (name == "fcall" || name == "evalsha" || name == "eval"):
				scripts += n
			}
		}
	}
	return usec, scripts
}
