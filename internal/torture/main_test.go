package torture

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// The scenarios re-run this test binary as worker processes (runChild).
// The server started here (REDIS_ADDR) is the observer: the limiter under
// test never talks to it. This is redistest.Main without its wait for a
// server old enough for Examples: this package has none, and its
// scenarios give each name its first token instead (run.firstToken).
func TestMain(m *testing.M) {
	redistest.Children(map[string]func() int{workerRole: runChild})
	addr, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", addr)
	code := m.Run()
	stop()
	os.Exit(code)
}

var long = flag.Bool("torture.long", false, "run the long version (make torture): more processes, goroutines and time")

// size is how hard a scenario pushes.
type size struct {
	procs, goroutines int
	// run is how long the workers run besides the fault; a scenario
	// spreads it before and after its fault.
	run time.Duration
	// repeats is how many times a scenario injects its fault.
	repeats int
}

func sizeOf() size {
	if *long {
		return size{procs: 6, goroutines: 8, run: 12 * time.Second, repeats: 3}
	}
	// Small enough that the package stays well under a minute with -race
	// on two cores, big enough that permits are contended (9 goroutines
	// taking 1 to 3 of the 5 permits the 3 long holders leave).
	return size{procs: 3, goroutines: 4, run: 2 * time.Second, repeats: 1}
}
