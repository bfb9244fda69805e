package limiter

import (
	"errors"
	"sync"
)

// fewReplicasNotice logs, once per master and Client, that a master has
// fewer connected replicas than WaitReplicas asks: every grant and
// refresh on its names then fails with a *ReplicationError (after a
// failover, until a replica has synced from the promoted master), which
// is correct but would otherwise say nothing to an operator.
type fewReplicasNotice struct {
	logged sync.Map // master address -> struct{}
}

// confirm is the package's confirm for s, noting in its Client whether
// the masters had the replicas s asks for.
func (s *Semaphore) confirm(op string, acked int, waitErr error) error {
	err := confirm(s.cfg.replicas, op, s.name, acked, waitErr)
	var re *ReplicationError
	if errors.As(err, &re) && re.Connected >= 0 {
		if _, seen := s.c.fewReplicas.logged.LoadOrStore(re.Master, struct{}{}); seen {
			return err
		}
		s.c.cfg.logger.Warn("redsem: a master has fewer connected replicas than WaitReplicas asks, so nothing on its names is granted or kept alive until one syncs (after a failover: until a replica follows the promoted master)",
			"master", re.Master, "connected", re.Connected, "want", re.Want, "name", re.Name)
	}
	return err
}
