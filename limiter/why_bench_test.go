package limiter_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// The ETA's error, measured: each sub-benchmark predicts grants (or a
// rate's slot) with the Inspector and then sees when they come, and
// reports the 90th percentile of |actual - ETA| / (actual - read) as
// eta-err-p90-%. Run with -benchtime=1x: each iteration is a few seconds
// of real waiting across processes.
//
//	go test -run '^$' -bench BenchmarkWhyETA -benchtime=1x ./limiter/
func BenchmarkWhyETA(b *testing.B) {
	b.Run("limit", benchETALimit)
	b.Run("pause", benchETAPause)
	b.Run("quarantine", benchETAQuarantine)
	b.Run("rate", benchETARate)
}

// prediction is one ETA: the waiter, when it was read and when it was
// predicted to be granted.
type prediction struct {
	id         string
	read, want time.Time
}

// reportETAError reports the p90 of the relative errors of ps against the
// grants in g (predictions never granted are dropped, and counted).
func reportETAError(b *testing.B, g *grants, ps []prediction) {
	var errs []float64
	for _, p := range ps {
		at, ok := g.get(p.id)
		if !ok || !at.After(p.read) {
			continue
		}
		errs = append(errs, math.Abs(float64(at.Sub(p.want)))/float64(at.Sub(p.read)))
	}
	reportP90(b, errs, len(ps))
}

func reportP90(b *testing.B, errs []float64, n int) {
	if len(errs) == 0 {
		b.Fatalf("none of %d predictions could be checked", n)
	}
	slices.Sort(errs)
	b.ReportMetric(100*errs[len(errs)*9/10], "eta-err-p90-%")
	b.ReportMetric(100*errs[len(errs)/2], "eta-err-p50-%")
	b.ReportMetric(float64(len(errs)), "predictions")
}

// A limit-bound queue with steady holds: 3 permits held 300ms each by 9
// goroutines in 3 processes, so about 6 wait; the queue is read every
// 170ms for 3s. The goroutines start 100ms apart: started
// together, they would be granted and release together for ever, a
// queue whose holders' ages tell nothing of their holds (see
// holdEstimate).
func benchETALimit(b *testing.B) {
	be := singleBackend(b)
	for range b.N {
		name := uniqueName(be, "etalimit")
		in := inspect.New(clientFor(b, be.client(b)))
		g := newGrants()
		for range 3 {
			startWhyChild(b, be, g, name, 3, 3, 300*time.Millisecond, 0, 300*time.Millisecond)
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // steady
		var ps []prediction
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(170 * time.Millisecond) {
			ws, err := in.Waiters(context.Background(), name)
			read := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range ws {
				ps = append(ps, prediction{id: w.ID, read: read, want: read.Add(w.Why.ETA)})
			}
		}
		time.Sleep(2 * time.Second)
		reportETAError(b, g, ps)
	}
}

// A paused name (1 to 2.5s) waited on by 2 processes: the head's ETA
// against its grant.
func benchETAPause(b *testing.B) {
	be := singleBackend(b)
	for range b.N {
		var ps []prediction
		g := newGrants()
		for j := range 4 {
			name := uniqueName(be, "etapause")
			in := inspect.New(clientFor(b, be.client(b)))
			if _, err := in.Pause(context.Background(), name, time.Second+time.Duration(j)*500*time.Millisecond); err != nil {
				b.Fatal(err)
			}
			startWhyChild(b, be, g, name, 1, 1, time.Hour, 0, 0)
			startWhyChild(b, be, g, name, 1, 1, time.Hour, 0, 0)
			ws := waitersOf(b, in, name, 2)
			ps = append(ps, prediction{id: ws[0].ID, read: time.Now(), want: time.Now().Add(ws[0].Why.ETA)})
		}
		redistest.Eventually(b, 10*time.Second, "the heads granted", func() bool {
			for _, p := range ps {
				if _, ok := g.get(p.id); !ok {
					return false
				}
			}
			return true
		})
		reportETAError(b, g, ps)
	}
}

// Waiters in 2 processes on a Redis that just started (quarantine 4s):
// the head's ETA against its grant.
func benchETAQuarantine(b *testing.B) {
	for range b.N {
		be := singleBackend(b)
		const q = 4 * time.Second
		name := uniqueName(be, "etaq")
		in := inspect.New(clientFor(b, be.client(b), limiter.RestartQuarantine(q)))
		g := newGrants()
		startWhyChild(b, be, g, name, 1, 1, time.Hour, q, 0)
		startWhyChild(b, be, g, name, 1, 1, time.Hour, q, 0)
		ws := waitersOf(b, in, name, 2)
		ps := []prediction{{id: ws[0].ID, read: time.Now(), want: time.Now().Add(ws[0].Why.ETA)}}
		redistest.Eventually(b, 10*time.Second, "the head granted", func() bool { _, ok := g.get(ps[0].id); return ok })
		reportETAError(b, g, ps)
	}
}

// A rate of 5/s spent by 2 processes: Why's ETA for a new event against
// the slot a reservation made right after gets.
func benchETARate(b *testing.B) {
	be := singleBackend(b)
	for range b.N {
		name := uniqueName(be, "etarate")
		c := clientFor(b, be.client(b))
		in := inspect.New(c)
		startRaters(b, be, name, "5/s", 2, 2, time.Now().Add(5*time.Second))
		rl, err := c.RateLimit(name, limiter.Rate{Events: 5, Per: time.Second, Burst: 1})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the rate in use recorded
		var errs []float64
		for range 10 {
			why, err := in.Why(context.Background(), name, "")
			if err != nil {
				b.Fatal(err)
			}
			r, err := rl.ReserveN(context.Background(), 1)
			if err != nil {
				b.Fatal(err)
			}
			if d := r.Delay(); d > 0 {
				errs = append(errs, math.Abs(float64(d-why.ETA))/float64(d))
			}
			time.Sleep(150 * time.Millisecond)
		}
		reportP90(b, errs, 10)
	}
}

// Why with 10,000 waiters queued (in one process: what is measured is
// the read and the replay): ms per call for the last waiter, and for a
// new request behind them all.
func BenchmarkWhy10000Waiters(b *testing.B) {
	be := singleBackend(b)
	ctx, cancel := context.WithCancel(context.Background())
	c := clientFor(b, be.client(b), limiter.AcquireTimeout(0))
	name := uniqueName(be, "why10k")
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() { b.StopTimer(); cancel(); wg.Wait() }()
	const n = 10000
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = sem.Acquire(ctx)
		}()
	}
	in := inspect.New(c)
	redistest.Eventually(b, 60*time.Second, "10,000 waiters", func() bool {
		w, err := in.Why(ctx, name, "")
		return err == nil && w.Ahead == n
	})
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		w, err := in.Why(ctx, name, "")
		if err != nil || w.Ahead != n || w.Reason != limiter.ReasonFull {
			b.Fatalf("%+v %v", w, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/why")
}
