package asynqmw

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// parkFor is a parked task's RetryIn: it comes back by itself only if no
// release of its key puts it back first (a lost unpark, a crashed
// worker whose permit came back at its TTL).
const parkFor = 30 * time.Second

// parkTTL bounds how long a key's park list outlives its last park.
const parkTTL = time.Hour

// unparkTries bounds how long an unpark retries a task that asynq has not
// yet moved to its retry set (the handler that parked it is returning).
const (
	unparkTries = 20
	unparkEvery = 25 * time.Millisecond
)

// Park lets a task whose Key rule's permit is taken leave its handler
// slot when nothing else it needs is: rather than wait, holding a slot
// that other customers' tasks could run in, it returns a *BusyError with
// Parked set, and the next release of that key's permit puts it back in
// its queue (asynq.Inspector.RunTask). rdb is asynq's Redis (the one its
// server uses): the park lists are kept there, with its tasks. A task
// that nobody puts back (its key's holders crashed, Redis lost the list)
// comes back after 30s. When its other rules' permits are taken too, a
// few handlers of each process (the key's Limit and one) wait for the
// key's permit as without Park, so that it is taken as soon as it frees,
// and the rest park; a task on its last try always waits (asynq archives
// it whatever it returns). Set asynq's
// Config.TaskCheckInterval low (say 100ms): a put-back task waits for
// an idle server's next check. A nil rdb makes New return a
// *limiter.ArgumentError naming Park.
func Park(rdb redis.UniversalClient) Option {
	return func(o *options) { o.park, o.parkSet = rdb, true }
}

// parking keeps, per key, the tasks that left their handler slot for it.
type parking struct {
	rdb  redis.UniversalClient
	insp *asynq.Inspector

	mu      sync.Mutex
	waiting map[string]int64 // this process's handlers waiting for a key's permit
}

func newParking(rdb redis.UniversalClient) *parking {
	return &parking{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), waiting: map[string]int64{}}
}

// join counts a handler as waiting for name's permit, unless most of
// this process's handlers already do; leave ends the count.
func (p *parking) join(name string, most int64) (leave func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting[name] >= most {
		return nil, false
	}
	p.waiting[name]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waiting[name]--; p.waiting[name] == 0 {
			delete(p.waiting, name)
		}
	}, true
}

// wait counts a handler as waiting for name's permit until leave.
func (p *parking) wait(name string) (leave func()) {
	leave, _ = p.join(name, math.MaxInt64)
	return leave
}

// parkKey is the list of the tasks parked on a gate's name; the hash tag
// keeps a Cluster's commands on it in one slot.
func parkKey(name string) string { return "redsem:park:{" + name + "}" }

// park adds the task running under ctx at the end of name's list and
// returns its entry. It reports false when the task is not asynq's or
// Redis failed: the task then waits as without Park.
func (p *parking) park(ctx context.Context, name string) (string, bool) {
	q, ok1 := asynq.GetQueueName(ctx)
	id, ok2 := asynq.GetTaskID(ctx)
	if !ok1 || !ok2 {
		return "", false
	}
	entry := q + "\x00" + id + "\x00" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	key := parkKey(name)
	_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.RPush(ctx, key, entry)
		pipe.Expire(ctx, key, parkTTL)
		return nil
	})
	return entry, err == nil
}

// unlist takes a task that got its permit after all out of name's list
// (best effort: an entry left behind is dropped by the unpark that finds
// its task running).
func (p *parking) unlist(name, entry string) {
	ctx, cancel := context.WithTimeout(context.Background(), pauseTimeout)
	defer cancel()
	p.rdb.LRem(ctx, parkKey(name), 1, entry)
}

// unpark puts the first task parked on name back in its queue, in the
// background: a permit of name was just released. An entry whose task
// asynq no longer holds for a retry (it came back by itself, ran, or was
// deleted) is dropped and the next one tried; one whose task asynq has
// not yet moved to its retry set is retried for a while.
func (p *parking) unpark(name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), unparkTries*unparkEvery+pauseTimeout)
		defer cancel()
		for ctx.Err() == nil {
			entry, err := p.rdb.LPop(ctx, parkKey(name)).Result()
			if err != nil {
				return // none parked (redis.Nil), or Redis failed: the fallback brings it
			}
			if p.runTask(ctx, entry) {
				return
			}
		}
	}()
}

// runTask moves an entry's task to its queue's pending list, and reports
// whether it did.
func (p *parking) runTask(ctx context.Context, entry string) bool {
	q, rest, _ := strings.Cut(entry, "\x00")
	id, at, _ := strings.Cut(rest, "\x00")
	ms, _ := strconv.ParseInt(at, 10, 64)
	for range unparkTries {
		err := p.runParked(q, id)
		switch {
		case err == nil:
			return true
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound), errors.Is(err, errNotParked):
			return false
		case time.Since(time.UnixMilli(ms)) > unparkTries*unparkEvery:
			return false // pending or running long after its park: it came back by itself
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(unparkEvery):
		}
	}
	return false
}

// errNotParked: the task is not waiting in asynq's retry set because it
// parked (it came back by itself, ran, completed, failed or was
// archived): an entry left behind, which must not run it again.
var errNotParked = errors.New("asynqmw: task not parked")

var errStillActive = errors.New("asynqmw: parked task still active")

// runParked moves the task to its queue's pending list if asynq holds it
// for a retry because it parked (asynq's RunTask alone would run a
// completed or archived task again). errStillActive: its handler has not
// yet returned the park; try again.
func (p *parking) runParked(q, id string) error {
	info, err := p.insp.GetTaskInfo(q, id)
	if err != nil {
		return err
	}
	switch {
	case info.State == asynq.TaskStateActive:
		return errStillActive
	case info.State != asynq.TaskStateRetry || !strings.Contains(info.LastErr, parkedText):
		return errNotParked
	}
	return p.insp.RunTask(q, id)
}
