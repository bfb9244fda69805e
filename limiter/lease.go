package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// errReleased ends a lease that its holder released.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// Lease is one holding of permits of a Semaphore. Its Client keeps it
// alive (see RefreshInterval) until Release, StopRefresh, loss or the
// Client's Close.
//
// The holder keeps a local deadline: the start of the last refresh Redis
// confirmed, plus the TTL, minus the clock drift allowance. When that
// deadline passes unconfirmed, or a refresh finds the lease gone (expired,
// released by an operator, or handed over with Resume), the lease is lost:
// Context is cancelled with cause ErrLeaseLost, Err returns
// it and the OnLost callback runs. Because the deadline starts before
// Redis extended the lease, the holder learns of loss before anyone else
// can be granted its permits, even while Redis is unreachable.
type Lease struct {
	sem    *Semaphore
	id     string
	given  bool // the id came from the caller, who may ask for it again (givenids.go)
	token  string
	weight int64
	ttl    time.Duration
	// parent is the context it was acquired or resumed with, whose values
	// ctx carries.
	parent context.Context
	// acquired is when the request that granted it was sent.
	acquired time.Time

	mu  sync.Mutex
	err error // why the lease ended; nil while held
	// ctx is made on first use (Context, Run), cancelled by end:
	// most leases are released without anyone asking, and making it
	// costs two allocations.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// keep says who keeps it alive while err is nil.
	keep keeping
	// short: Redis keeps it for less than its TTL until a refresh (a
	// release granted it directly: see takeGrant).
	short    bool
	deadline time.Time
	watchdog *time.Timer

	refreshEntry entry // see refresher.addLease
}

// keeping is who keeps a live lease alive.
type keeping uint8

const (
	byRefresher keeping = iota // the refresher, every RefreshInterval
	byHolder                   // the holder alone, by Refresh (RefreshInterval 0): its end at the TTL is no loss
	detached                   // nobody here: StopRefresh or Park let go of it while it lives on in Redis; Close leaves it
)

// errReplyLate: a grant's reply came after the lease's local deadline, so
// the grant was given back unused. Acquire and TryAcquire try again (see
// lateRetries): the permits were free, only the reply was slow.
var errReplyLate = fmt.Errorf("%w: the reply came after the lease's local deadline", ErrLeaseLost)

// lateRetries bounds the attempts TryAcquire makes again after grants
// whose replies came too late (errReplyLate); Acquire retries within its
// wait's bound.
const lateRetries = 2

// newLease makes the lease of a grant that Redis made to last at least
// life (the TTL, or less for a direct grant) after sent, a time before the
// grant. It fails, and the caller gives the permits back, when the lease's
// local deadline already passed (ErrLeaseLost: a reply that slow is of no
// use) or the Client's Close began (ErrClosed: Close releases only the
// leases it found).
func newLease(parent context.Context, s *Semaphore, id string, given bool, r store.AcquireReply, sent time.Time, life time.Duration) (*Lease, error) {
	deadline := sent.Add(life - s.cfg.drift(life))
	if !time.Now().Before(deadline) {
		return nil, errReplyLate
	}
	keep := byRefresher
	if s.cfg.refresh == 0 {
		keep = byHolder
	}
	l := &Lease{sem: s, id: id, given: given, token: r.Token, weight: r.Weight, ttl: s.cfg.ttl, parent: parent,
		keep: keep, deadline: deadline, acquired: sent, short: life < s.cfg.ttl}
	if !s.c.ids.track(l) { // before the watchdog, whose end untracks it
		return nil, ErrClosed
	}
	l.mu.Lock() // the watchdog may fire before newLease returns
	l.watchdog = time.AfterFunc(time.Until(deadline), l.expire)
	l.mu.Unlock()
	s.cfg.observer.Held(s.name, 1)
	s.c.uses.mark(useKey{name: s.name, limit: s.limit})
	if keep == byRefresher {
		// A shorter life (a direct grant) is extended to the TTL by the first
		// refresh, late enough that a short hold ends before it.
		s.c.refresher.addLease(l, sent.Add(min(s.cfg.refresh, life*3/4)))
	}
	return l, nil
}

// ID is the lease id: random unless given with the ID option.
func (l *Lease) ID() string { return l.id }

// Token is the fencing token: strictly greater than the token of every
// earlier acquisition or handover of this semaphore name, including after
// every key of the name expired (tokens are never below the Redis
// server's time in microseconds; on a Redlock Client, the highest of the
// quorum's, which follows the nodes' clocks within half a second whatever
// the clients' clocks say). A same-id retry after a lost reply returns the lease's
// existing token; Resume gives a new one. Pass it to the resource you
// protect so it can refuse a holder that was superseded.
func (l *Lease) Token() int64 {
	t, _ := strconv.ParseInt(l.token, 10, 64)
	return t
}

// Weight is the number of permits the lease holds.
func (l *Lease) Weight() int64 { return l.weight }

// Ticket identifies the lease for another process (see Semaphore.Resume).
func (l *Lease) Ticket() Ticket {
	return Ticket{Name: l.sem.name, ID: l.id, Weight: l.weight, Token: l.Token()}
}

// Context carries the values of the context the lease was acquired or
// resumed with, and is cancelled when the lease ends; context.Cause is
// ErrLeaseLost after a loss and ErrNotHeld after Release.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(detach(l.parent))
		if l.err != nil {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

// Err returns nil while the lease is held, an error matching ErrLeaseLost
// (with the reason) once it was lost or ran out its TTL, and one matching
// ErrNotHeld once it was released.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Refresh extends the lease by its TTL now (never shortening it). A lease
// Redis no longer holds is ended as lost and ErrLeaseLost returned; a
// Redis failure is returned wrapped and leaves the lease held until its
// local deadline. Refresh of a lease that already ended returns Err
// without contacting Redis.
func (l *Lease) Refresh(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	res := l.sem.c.st.Refresh(ctx, []store.RefreshBatch{{Keys: l.sem.keys, Leases: []store.RefreshItem{l.refreshItem()},
		Replicas: l.sem.cfg.replicas}})[0]
	if err := l.applyRefresh(sent, res, 0); err != nil {
		if res.Err != nil {
			return redisError("refresh", l.sem.name, err)
		}
		return err
	}
	return l.Err()
}

// applyRefresh applies the answer to a refresh sent at sent, of which the
// lease is the j-th: held, it extends the local deadline; gone, it ends
// the lease as lost. It returns the failure of a refresh that did not
// confirm the lease, which leaves the deadline as it was: Redis's, or
// the *ReplicationError of one that extended the lease on the master but
// not on the replicas WaitReplicas asks for (a failover would bring back
// the older expiry they have).
func (l *Lease) applyRefresh(sent time.Time, res store.RefreshResult, j int) error {
	if res.Err != nil {
		l.refreshFailed()
		return res.Err // unwrapped: a failed batch costs nothing per lease
	}
	held := j < len(res.Held) && res.Held[j]
	if held {
		if err := l.sem.confirm("refresh", res.Acked, res.WaitErr); err != nil {
			l.refreshFailed()
			return err
		}
	}
	l.refreshed(sent, held)
	return nil
}

// Release gives the permits back and grants them to (or wakes) the
// waiters that now fit, in queue order (see the package doc). The
// lease ends locally first, whatever Redis answers. The call to Redis is
// detached from ctx's cancellation and bounded by ReleaseTimeout, so a
// caller whose ctx already ended still gives the permits back. If Redis
// does not answer, or cannot take writes for now (a failover), the error
// is returned and the Client sends the release again in the background
// (see resend) until Redis answers, the TTL runs out or the Client
// closes: the permits come back then at the latest. A lease Redis no
// longer holds gives ErrNotHeld; another holder's lease is never touched. (A
// lease that reached its Redis expiry but was not yet swept may release
// without error: its permits were free for the taking either way.) A
// nil ctx gives an *ArgumentError and leaves the lease held.
func (l *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil") // the lease stays held
	}
	done := func() {}
	if l.given {
		// Until Redis has removed it, no attempt of this Client may
		// reclaim the lease as its own. (A made-up id is never asked for
		// again, so never reclaimed.)
		done = l.sem.c.ids.releasing(l)
	}
	live := l.endLive(errReleased)
	ctx, cancel := context.WithTimeout(detach(ctx), l.sem.cfg.releaseTimeout)
	defer cancel()
	n, err := bounded(l.sem.c, ctx, func() (int64, error) { return l.sem.release(ctx, l.id, l.token, live) })
	if err != nil {
		if resendable(err) {
			l.resend(done)
		} else {
			done()
		}
		return redisError("release", l.sem.name, err)
	}
	done()
	if n == 0 {
		return fmt.Errorf("limiter: release %q lease %s: %w", l.sem.name, l.id, ErrNotHeld)
	}
	return nil
}

// resendable reports whether a failed release may succeed if sent again:
// Redis did not answer, or answered that it cannot take writes for now (a
// failover, a load); not a refusal that lasts (an ACL, a script error).
func resendable(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, transient := range []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "MOVED", "ASK"} {
		if strings.HasPrefix(re.Error(), transient) {
			return true
		}
	}
	return false
}

// resendFirst and resendMax pace a release sent again: soon, since on a
// Cluster the slots of a dead master move to its replica in seconds,
// then twice a second (a call to a Cluster node known to be down fails
// here without being sent: see redisstore.downFor).
const (
	resendFirst = 100 * time.Millisecond
	resendMax   = 500 * time.Millisecond
)

// resend sends a release that Redis did not answer (or failed) again, in
// the background, until Redis answers it, the lease's TTL from now runs
// out (it is gone by then anyway), or the Client closes; then done. The
// holder's permits come back as soon as Redis answers (on a Cluster, the
// replica promoted in place of a dead master), not a TTL later. The token
// makes it safe: it removes this lease, never a later one of its id.
func (l *Lease) resend(done func()) {
	c := l.sem.c
	until := time.Now().Add(l.ttl)
	c.spawn(func() {
		defer done()
		for wait := resendFirst; time.Now().Before(until); wait = min(2*wait, resendMax) {
			if !l.sem.pause(context.Background(), wait) {
				return
			}
			ctx, cancel := context.WithTimeout(c.ctx, l.sem.cfg.releaseTimeout)
			_, err := bounded(c, ctx, func() (int64, error) { return l.sem.release(ctx, l.id, l.token, false) })
			cancel()
			if err == nil {
				return
			}
		}
	})
}

// detach is context.WithoutCancel, without the allocation for
// Background (the usual ctx of a deferred Release), which has no
// cancellation or deadline to drop.
func detach(ctx context.Context) context.Context {
	if ctx == context.Background() {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// pastMaxHold reports whether the lease has been kept alive for MaxHold.
func (l *Lease) pastMaxHold(now time.Time) bool {
	return l.sem.cfg.maxHold > 0 && now.Sub(l.acquired) >= l.sem.cfg.maxHold
}

func (l *Lease) localDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *Lease) refreshItem() store.RefreshItem {
	return store.RefreshItem{ID: l.id, Token: l.token, TTL: l.ttl, Weight: l.weight, Owner: l.sem.c.id,
		Quarantine: l.sem.cfg.quarantine, GivenUp: l.givenUp}
}

// givenUp reports whether the holder released or detached the lease.
// Both mark the lease before they touch Redis.
func (l *Lease) givenUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keep == detached || errors.Is(l.err, errReleased)
}

func (l *Lease) refreshFailed() { l.sem.cfg.observer.RefreshFailed(l.sem.name) }

// refreshed applies the answer to a refresh sent at sent.
func (l *Lease) refreshed(sent time.Time, held bool) {
	if !held {
		l.end(fmt.Errorf("%w: %q lease %s is gone from Redis", ErrLeaseLost, l.sem.name, l.id), true)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.deadline = maxTime(l.deadline, sent.Add(l.ttl-l.sem.cfg.drift(l.ttl)))
	l.short = false
	l.watchdog.Reset(time.Until(l.deadline))
}

// expire runs when the local deadline passes.
func (l *Lease) expire() {
	l.mu.Lock()
	pending := time.Until(l.deadline) > 0 // a refresh was confirmed meanwhile
	keep := l.keep
	l.mu.Unlock()
	if pending {
		return
	}
	reason := "no refresh confirmed within its TTL"
	if keep != byRefresher {
		reason = "its TTL elapsed without refresh"
	}
	// A loss only where this process kept it alive and failed to.
	l.end(fmt.Errorf("%w: %q lease %s: %s", ErrLeaseLost, l.sem.name, l.id, reason), keep == byRefresher)
}

// endLive ends a lease that its holder gives up and reports whether it
// was still live: ended by nothing else and within its local deadline,
// hence not expired in Redis.
func (l *Lease) endLive(err error) bool {
	return l.end(err, false) && time.Now().Before(l.localDeadline())
}

// end finishes the lease once (reporting whether this call did); lost
// says whether to report it as a loss.
func (l *Lease) end(err error, lost bool) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	if l.watchdog != nil { // nil while newLease is still setting it up
		l.watchdog.Stop()
	}
	if l.cancel != nil {
		l.cancel(err)
	}
	l.mu.Unlock()

	s := l.sem
	s.c.refresher.remove(l)
	s.c.ids.untrack(l, l.ttl+s.cfg.drift(l.ttl))
	s.cfg.observer.Held(s.name, -1)
	if !lost {
		return true
	}
	s.cfg.observer.Lost(s.name)
	s.cfg.logger.Warn("redsem: lease lost", "name", s.name, "id", l.id, "err", err)
	if s.cfg.onLost != nil {
		s.c.spawn(func() { s.cfg.onLost(l, err) })
	}
	return true
}
