package limiter

import "sync"

// shared is the process-wide machinery of one store: a single refresher
// that batches every held lease into one pipeline, and a single wake hub
// that keeps one subscription per semaphore name for all local waiters.
// Both are idle (no goroutine, no connection) when nothing is held or
// waited for, so an entry costs a few words; entries are never removed.
type shared struct {
	refresher *refresher
	hub       *hub
}

var (
	registryMu sync.Mutex
	registry   = map[any]*shared{}
)

func sharedFor(st store) *shared {
	registryMu.Lock()
	defer registryMu.Unlock()
	sh, ok := registry[st.identity()]
	if !ok {
		sh = &shared{refresher: newRefresher(st), hub: newHub(st)}
		registry[st.identity()] = sh
	}
	return sh
}
