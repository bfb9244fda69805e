package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

type pipeHook struct{ after func([]redis.Cmder) }

func (h pipeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(cmds)
		return err
	}
}

// userWithoutWait returns a client of srv as a user that may run everything
// but WAIT (an ACL without the +wait the README asks for with
// WaitReplicas; a proxy without WAIT answers "unknown command" alike),
// and a counter of the script commands that succeeded in its pipelines.
func userWithoutWait(t *testing.T, srv *redistest.Server) (*redis.Client, func() (ran int, log []string)) {
	ctx := ctxT(t, 10*time.Second)
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	user := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "nowait", "pw" })
	var mu sync.Mutex
	var ran int
	var log []string
	user.AddHook(pipeHook{func(cmds []redis.Cmder) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			switch c.Name() {
			case "fcall", "evalsha", "eval", "wait":
				log = append(log, c.Name()+": "+errText(c.Err()))
				if c.Name() != "wait" && c.Err() == nil {
					ran++
				}
			}
		}
	}})
	return user, func() (int, []string) { mu.Lock(); defer mu.Unlock(); return ran, append([]string(nil), log...) }
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// WAIT refused (an ACL without +wait): the acquire that ran is answered
// with the ReplicationError and its grant forgotten. WAIT's NOPERM must not
// read as FCALL's refusal, or the pipeline would go again by EVALSHA and
// EVAL: the acquire, run twice, would find its own lease and answer
// "full", and the only permit would stay taken for the TTL.
func TestWaitRefusedRunsAcquireOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	user, scripts := userWithoutWait(t, srv)
	sem, err := clientFor(t, user, limiter.WaitReplicas(1, 200*time.Millisecond), limiter.TTL(time.Minute)).Semaphore("nowait", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx)
	ran, log := scripts()
	t.Logf("TryAcquire: lease %v, err %v; pipelined: %q", l != nil, err, log)
	time.Sleep(300 * time.Millisecond) // a forget, if any, is done
	other, err2 := clientFor(t, srv.Client(t)).Semaphore("nowait", 1)
	if err2 != nil {
		t.Fatal(err2)
	}
	l2, err2 := other.TryAcquire(ctx)
	if l2 != nil {
		_ = l2.Release(ctx)
	}
	if ran > 1 {
		t.Errorf("the acquire script ran %d times for one TryAcquire", ran)
	}
	if l == nil && l2 == nil {
		t.Errorf("TryAcquire gave no lease (%v), yet the semaphore's only permit stays taken: %v", err, err2)
	}
}

// The same for Resume: run twice, the second run (with the old token)
// would answer "not held" for a lease the first took over.
func TestWaitRefusedRunsResumeOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	plain, err := clientFor(t, srv.Client(t), limiter.TTL(time.Minute)).Semaphore("nowaitr", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := plain.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	user, scripts := userWithoutWait(t, srv)
	sem, err := clientFor(t, user, limiter.WaitReplicas(1, 200*time.Millisecond), limiter.TTL(time.Minute)).Semaphore("nowaitr", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sem.Resume(ctx, l.Ticket())
	ran, log := scripts()
	t.Logf("Resume: lease %v, err %v; pipelined: %q", r != nil, err, log)
	if ran > 1 {
		t.Errorf("the resume script ran %d times for one Resume", ran)
	}
	if re := new(limiter.ReplicationError); !errors.As(err, &re) {
		t.Errorf("Resume: %v, want the ReplicationError of WAIT's refusal", err)
	}
}
