package limiter

import (
	"errors"
	"sync"

	"github.com/redsem/redsem/limiter/internal/store"
)

// fewReplicasNotice logs, once per master and Client, that a master has
// fewer connected replicas than WaitReplicas asks: every grant and
// refresh on its names then fails with a *ReplicationError (after a
// failover, until a replica has synced from the promoted master), which
// is correct but would otherwise say nothing to an operator.
type fewReplicasNotice struct {
	logged sync.Map // master address -> struct{}
}

// confirm returns nil when s's WaitReplicas asks nothing or acked
// replicas (WAIT's answer; waitErr its failure) are enough, else the
// *ReplicationError, logged once per master when the master had fewer
// replicas than asked.
func (s *Semaphore) confirm(op string, acked int, waitErr error) error {
	w := s.cfg.replicas
	if !w.On() || (waitErr == nil && acked >= w.N) {
		return nil
	}
	re := &ReplicationError{Name: s.name, Op: op, Want: w.N, Acked: acked, Timeout: w.Timeout, Err: waitErr, Connected: -1}
	var few *store.FewReplicas
	if errors.As(waitErr, &few) {
		re.Err, re.Connected, re.Master = nil, few.Connected, few.Addr
	}
	if re.Connected >= 0 {
		if _, seen := s.c.fewReplicas.logged.LoadOrStore(re.Master, struct{}{}); seen {
			return re
		}
		// Nothing on its names is granted or kept alive until one syncs
		// (after a failover: until a replica follows the promoted master).
		s.c.cfg.logger.Warn("redsem: too few replicas for WaitReplicas",
			"master", re.Master, "connected", re.Connected, "want", re.Want, "name", re.Name)
	}
	return re
}
