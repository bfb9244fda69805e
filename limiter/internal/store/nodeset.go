package store

import "sync"

// NodeSet is a set of node addresses, safe for the concurrent calls of a
// quorum: the eviction check's record of the nodes found safe.
type NodeSet struct {
	mu sync.Mutex
	m  map[string]bool
}

// Has reports whether node is in the set.
func (s *NodeSet) Has(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[node]
}

// Add puts node in the set.
func (s *NodeSet) Add(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]bool{}
	}
	s.m[node] = true
}
