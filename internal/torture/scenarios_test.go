package torture

import (
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// TTLs of the scenarios' leases: each acquisition takes one at random. A
// TTL of 3s or more is granted by a release's handoff, a shorter one
// wakes the waiter to acquire (the package doc of limiter): both paths
// run. None is shorter than 2s: a holder whose process stalls for most of
// its TTL (a loaded test machine) is told of its loss late, and the log
// would blame the limiter for it.
var ttls = []time.Duration{shortestTTL, longestTTL}

const (
	shortestTTL = 2 * time.Second
	longestTTL  = 3 * time.Second
)

// scenario is one row (or more) of the table.
type scenario struct {
	name string
	run  func(t *testing.T, sz size)
}

// scenarios are run in this order.
var scenarios = []scenario{
	{"baseline", baseline},
	{"pause-short", pauseShort},
	{"pause-long", pauseLong},
	{"kill-9", kill9},
	{"eviction-refused", evictionRefused},
	{"eviction-noeviction", evictionNoEviction},
	{"eviction-unguarded", evictionUnguarded},
	{"redlock-stop", redlockStop},
	{"redlock-pause", redlockPause},
	{"restart-empty", restartEmpty},
	{"restart-unguarded", restartUnguarded},
	{"blackhole", blackhole},
	{"failover", failover},
	{"redlock-restart", redlockRestart},
	{"cluster-master-killed", clusterMasterKilled},
}

func TestTorture(t *testing.T) {
	sz := sizeOf()
	tableMu.Lock()
	table = nil // -count=N runs it again
	tableMu.Unlock()
	t.Cleanup(func() { t.Logf("%d processes x %d goroutines per scenario:%s", sz.procs, sz.goroutines, tableText()) })
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			// As many at a time as -parallel allows (GOMAXPROCS by
			// default): the workers mostly sleep, and each scenario has
			// its own servers and keys.
			t.Parallel()
			s.run(t, sz)
		})
	}
}

func single(srv *redistest.Server) target { return target{addrs: []string{srv.Addr()}} }

// weighted is the usual semaphore: permits taken 1 to 3 at a time,
// one per worker held long, and 5 more for the others to contend for.
func weighted(name string, sz size, tg target, fault func(t *testing.T, r *run)) spec {
	return spec{name: name, target: tg, limit: int64(sz.procs) + 5, maxWeight: 3, ttls: ttls, longHolders: true, fault: fault}
}

// faults injects fault sz.repeats times, evenly spread over the run.
func faults(sz size, fault func(i int)) {
	gap := sz.run / time.Duration(sz.repeats+1)
	for i := range sz.repeats {
		time.Sleep(gap)
		fault(i)
	}
	time.Sleep(gap)
}

func baseline(t *testing.T, sz size) {
	srv := redistest.StartServer(t)
	addRow(runScenario(t, sz, weighted("baseline", sz, single(srv), func(t *testing.T, r *run) { time.Sleep(sz.run) })))
}

// A pause shorter than what is left of any lease's TTL at its last
// refresh (2/3 of the TTL) costs holders nothing; they wait it out.
func pauseShort(t *testing.T, sz size) {
	srv := redistest.StartServer(t)
	d := shortestTTL / 2
	addRow(runScenario(t, sz, weighted("pause-short", sz, single(srv), func(t *testing.T, r *run) {
		faults(sz, func(int) {
			srv.Pause(t)
			time.Sleep(d)
			srv.Resume(t)
		})
		r.note("paused %dx%v", sz.repeats, d)
	})))
}

// A pause longer than every TTL: every holder must be told of its loss
// before Redis, once resumed, can grant its permits again. Each pause
// starts while a holder means to hold past it, so that someone must be
// told.
func pauseLong(t *testing.T, sz size) {
	srv := redistest.StartServer(t)
	d := longestTTL + 500*time.Millisecond
	s := weighted("pause-long", sz, single(srv), func(t *testing.T, r *run) {
		faults(sz, func(int) {
			r.waitOutlasting(t, d)
			srv.Pause(t)
			time.Sleep(d)
			srv.Resume(t)
		})
		r.note("paused %dx%v", sz.repeats, d)
	})
	s.minLost = sz.repeats
	addRow(runScenario(t, sz, s))
}
