package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Batching. Concurrent Takes on one Redis are decided together: while a
// script run is out, new requests queue; the caller whose run comes back
// hands the queue to the oldest waiter, which sends it as one script run
// deciding each request in order, all-or-nothing each, as if they had come
// one by one. Redis then parses one command and enters Lua once for many
// decisions. No goroutine is started: the callers take turns.

// leaders is how many script runs may be out at once: one on the wire
// while the next is being built.
const leaders = 2

// pending is one request, queued or in a run.
type pending struct {
	keys  []string    // each check's keys, in order
	now   float64     // µs, or redisTime
	args  []checkArgs // one per check
	reply []int64
	err   error
	state atomic.Int32
	wake  chan struct{} // receives once: leader or done
	// deadline is when its caller stops waiting: the Store's timeout or
	// the caller's context's deadline, whichever is sooner; zero for none.
	// A run serving several callers is bounded by the latest of theirs,
	// not by its leader's.
	deadline time.Time
	// expires is when the Store's timeout runs out, zero for none. A
	// queued caller waits on a timer for it rather than on a context of
	// its own: a context and its timer per call cost more CPU than the
	// rest of the call on the client's side.
	expires time.Time
	// fast is set when the request went as one byte in its run, and
	// fastReply holds its reply as the general path's (see expand).
	fast      bool
	fastReply [6]int64
	// room for the args and keys of a request of up to two checks
	argBuf [2]checkArgs
	keyBuf [2]string
}

// checkArgs is one check of a request, as the script and the denial cache
// read it.
type checkArgs struct {
	p      *params
	cost   int64 // its CostFor the request's cost
	shadow bool
	key    int // the index in keys of its first key
}

// pending states
const (
	waiting   = iota // in the queue
	leading          // handed the queue: send it
	claimed          // in a run
	done             // reply or err set
	abandoned        // its caller gave up
)

type batcher struct {
	s       *Store
	mu      sync.Mutex
	queue   []*pending
	running int
}

// take decides p, alone or with others, within ctx and p's deadlines.
func (b *batcher) take(ctx context.Context, p *pending) ([]int64, error) {
	b.mu.Lock()
	if b.running < leaders {
		b.running++
		b.mu.Unlock()
		return b.lead(ctx, p)
	}
	p.wake = make(chan struct{}, 1)
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	var expired <-chan time.Time
	if !p.expires.IsZero() {
		t := getTimer(time.Until(p.expires))
		defer putTimer(t)
		expired = t.C
	}
	select {
	case <-p.wake:
	case <-ctx.Done():
		if p.abandon() {
			return nil, ctx.Err()
		}
		<-p.wake // made leader or done just now
	case <-expired:
		if p.abandon() {
			return nil, context.DeadlineExceeded
		}
		<-p.wake
	}
	if p.state.Load() == leading {
		return b.lead(ctx, p)
	}
	return p.reply, p.err
}

// abandon marks p given up by its caller, unless it was just made leader
// or done.
func (p *pending) abandon() bool {
	return p.state.CompareAndSwap(waiting, abandoned) || p.state.CompareAndSwap(claimed, abandoned)
}

// gaveUp reports whether p's caller no longer waits: its context is done
// or the Store's timeout has run out.
func (p *pending) gaveUp(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.expires.IsZero() && !time.Now().Before(p.expires) {
		return context.DeadlineExceeded
	}
	return nil
}

// timers are reusable timers for queued callers, stopped and drained
// before they go back: one serves call after call.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	if !t.Stop() {
		// It fired unread. Since Go 1.23 Stop drops that, but not under
		// GODEBUG=asynctimerchan=1, where the next caller to get this
		// timer would time out at once.
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// lead sends p and as much of the queue as fits in one run, then hands
// the rest of the queue to its oldest live waiter. A leader whose own
// caller has given up still sends the others' requests, without its own.
func (b *batcher) lead(ctx context.Context, p *pending) ([]int64, error) {
	gaveUp := p.gaveUp(ctx)
	self := gaveUp == nil
	var batch []*pending
	if self {
		batch = append(batch, p)
	}
	b.mu.Lock()
	for len(b.queue) > 0 && len(batch) < b.s.maxBatch {
		q := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if q.state.CompareAndSwap(waiting, claimed) {
			batch = append(batch, q)
		}
	}
	b.mu.Unlock()

	var replies [][]int64
	var err error
	if len(batch) > 0 {
		// A run serving others besides its leader's caller must not be
		// cancelled by that one caller giving up, and it lasts until the
		// latest deadline among them (each caller still stops waiting at
		// its own).
		rctx := ctx
		if len(batch) > 1 || !self {
			rctx = context.WithoutCancel(ctx)
		}
		if dl, ok := latest(batch); ok {
			var cancel context.CancelFunc
			rctx, cancel = context.WithDeadline(rctx, dl)
			defer cancel()
		}
		replies, err = b.s.run(rctx, batch)
	}
	for i, q := range batch {
		if q == p {
			continue
		}
		if err != nil {
			q.err = err
		} else {
			q.reply = replies[i]
		}
		if q.state.CompareAndSwap(claimed, done) {
			q.wake <- struct{}{}
		}
	}

	b.mu.Lock()
	for len(b.queue) > 0 {
		q := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if q.state.CompareAndSwap(waiting, leading) {
			b.mu.Unlock()
			q.wake <- struct{}{}
			return b.own(gaveUp, replies, err)
		}
	}
	b.running--
	b.mu.Unlock()
	return b.own(gaveUp, replies, err)
}

// latest is the latest deadline in batch, if every request has one.
func latest(batch []*pending) (time.Time, bool) {
	var dl time.Time
	for _, q := range batch {
		if q.deadline.IsZero() {
			return time.Time{}, false
		}
		if q.deadline.After(dl) {
			dl = q.deadline
		}
	}
	return dl, true
}

// own is the leader's answer: its reply, first in the batch, or why its
// caller gave up when it sent the run without its own request.
func (b *batcher) own(gaveUp error, replies [][]int64, err error) ([]int64, error) {
	if gaveUp != nil {
		return nil, gaveUp
	}
	return ownReply(replies, err)
}

func ownReply(replies [][]int64, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}
