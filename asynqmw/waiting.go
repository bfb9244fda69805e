package asynqmw

import "sync"

// waiting counts this process's handlers that wait in a gate's queue
// (limiter.Semaphore.Acquire), by gate name. While one waits, the gate
// grants a newcomer nothing (its queue is served in order), so a
// TryAcquire there is refused without asking Redis: tryOrPark and
// haveRoom skip it (in the fleet benchmark, 8 of the 74 Redis commands
// a task cost). Entries are dropped at zero: nothing is kept per key
// between tasks.
type waiting struct {
	mu sync.Mutex
	n  map[string]int
}

// enter counts one waiter on name until leave is called.
func (w *waiting) enter(name string) (leave func()) {
	w.mu.Lock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[name]++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.n[name]--; w.n[name] <= 0 {
			delete(w.n, name)
		}
		w.mu.Unlock()
	}
}

// queued reports whether a handler of this process waits on name.
func (w *waiting) queued(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[name] > 0
}
