package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Batching. Concurrent Takes on one Redis are decided together: while a
// script run is out, new requests queue; the caller whose run comes back
// hands the queue to the oldest waiter, which sends it as one script run
// deciding each request in order, all-or-nothing each, as if they had come
// one by one. Redis then parses one command and enters Lua once for many
// decisions. No goroutine is started: the callers take turns.
//
// What a queued caller costs the process is most of what batching costs
// it, so a queued request makes nothing of its own: its pending, with the
// channel it is woken on, comes from a pool; the Store's timeout of every
// queued request is watched by one timer per batcher, not one per request
// (see watch).
//
// A request's wait for its run is not the store's to answer for: the
// store's timeout bounds a run from when it is written (see write). A
// request that waits in the queue past the store's timeout, or past its
// caller's deadline, is shed (sluice.ErrShed), and the breaker hears
// nothing of it.

// leaders is how many script runs may be out at once. A second goes out
// only with a full run (maxBatch requests) to send, see mayLead: below
// that, requests wait for the run out to come back and go together, so
// that a run carries as many as arrive in a round trip. Two runs of half
// as many cost Redis a second run's fixed cost (the call, TIME, the
// clock) and the process a second round trip, so one run out at a time
// costs both less per request and carries more requests a second. A
// second run is worth its fixed cost only once a full one waits.
const leaders = 2

// pending is one request, queued or in a run.
type pending struct {
	keys  []string    // each check's key, in order: keys[i] is args[i]'s
	now   float64     // µs, or redisTime
	args  []checkArgs // one per check
	reply []int64
	err   error
	state atomic.Int32
	// wake receives once per request that queues: from the leader that
	// makes it leader or done, or from the watchdog that expires it. It is
	// made once per pending and kept through the pool.
	wake chan struct{}
	// deadline is when its caller stops waiting for its turn: the Store's
	// timeout or the caller's context's deadline, whichever is sooner;
	// zero for none. Without a Store timeout, a run serving several
	// callers is bounded by the latest of theirs, not by its leader's.
	deadline time.Time
	// expires is when the Store's timeout for its wait runs out, zero for
	// none. A queued caller is woken at it by the batcher's watchdog
	// rather than by a context or a timer of its own: those, per call,
	// cost more CPU than the rest of the call on the client's side.
	expires time.Time
	// wrote is set once p is in a run that went out.
	wrote atomic.Bool
	// fastReply holds the reply of a request that went as one byte in its
	// run, as the general path's (see expand).
	fastReply [6]int64
	// room for the args and keys of a request of up to two checks
	argBuf [2]checkArgs
	keyBuf [2]string
}

// pendings are requests whose callers have returned, for the next Takes.
// A request goes back only when nothing else can touch it any more: not
// one its caller gave up on, which a leader may still be deciding.
var pendings = sync.Pool{New: func() any { return &pending{wake: make(chan struct{}, 1)} }}

// newPending is a request at now with no checks yet.
func newPending(now float64) *pending {
	p := pendings.Get().(*pending)
	p.now = now
	p.args = p.argBuf[:0]
	p.keys = p.keyBuf[:0]
	return p
}

// release gives p back to the pool once its caller is done with it,
// unless its caller gave up waiting (abandoned): a leader may still be
// writing its reply.
func (p *pending) release() {
	if p.state.Load() == abandoned {
		return
	}
	wake := p.wake
	*p = pending{wake: wake} // an empty channel: each send to it was received
	pendings.Put(p)
}

// again readies p, which a run did not decide (errMoved), to be sent
// again.
func (p *pending) again() {
	p.reply, p.err = nil, nil
	p.wrote.Store(false)
}

// checkArgs is one check of a request, as the script and the denial cache
// read it.
type checkArgs struct {
	p      *params
	cost   int64 // the check's Units
	shadow bool
}

// pending states
const (
	waiting   = iota // in the queue
	leading          // handed the queue: send it
	claimed          // in a run
	done             // reply or err set
	abandoned        // its caller gave up, or the watchdog gave up for it
)

// batcher batches the requests of one flavour bound for one link.
type batcher struct {
	l       *link
	f       flavour
	mu      sync.Mutex
	queue   []*pending // from head on; see pop
	head    int
	running int
	// runs are the runs out, by which stalled tells a run that stopped
	// answering; free are finished ones, kept for their slices.
	runs []*run
	free []*run
	// watchdog wakes queued requests whose Store timeout for their wait
	// ran out, at armed (zero when it is not set).
	watchdog *time.Timer
	armed    time.Time
}

// run is one script run being sent by its leader.
type run struct {
	batch []*pending
	buf   runBuf
	start time.Time // when it went out
}

// take decides p, alone or with others, within ctx and p's deadlines.
func (b *batcher) take(ctx context.Context, p *pending) ([]int64, error) {
	b.mu.Lock()
	if b.mayLead(len(b.queue)-b.head+1, p) {
		b.running++
		b.mu.Unlock()
		return b.lead(ctx, p)
	}
	b.queue = append(b.queue, p)
	if !p.expires.IsZero() {
		b.watch(p.expires)
	}
	b.mu.Unlock()
	select {
	case <-p.wake:
	case <-ctx.Done():
		if p.abandon() {
			// Given up queued, or in a run out: in a run, the script may
			// have run, and its charge stays, as any lost answer's.
			return nil, stopped(ctx)
		}
		<-p.wake // made leader, done or expired just now
	}
	switch p.state.Load() {
	case leading:
		return b.lead(ctx, p)
	case abandoned: // by the watchdog
		return nil, sluice.ErrShed
	}
	return p.reply, p.err
}

// mayLead reports whether a run of n requests, p's the latest, may go out
// now, with b.mu held: at once when no run is out, and beside one only
// when it is full, or when the run out has stalled as of p's arrival.
func (b *batcher) mayLead(n int, p *pending) bool {
	return b.running == 0 || b.running < leaders && (n >= b.l.s.maxBatch || b.stalled(p.arrived(b.l.s.timeout)))
}

// stalled reports whether a run out has been out for half the Store's
// timeout at now (zero: unknown), with b.mu held. Past that, the queue
// goes in a run of its own however short, so that a connection that stops
// answering holds up its own run's requests, not every request after
// them until its run times out.
func (b *batcher) stalled(now time.Time) bool {
	if now.IsZero() || b.l.s.timeout <= 0 {
		return false
	}
	for _, r := range b.runs {
		if now.Sub(r.start) > b.l.s.timeout/2 {
			return true
		}
	}
	return false
}

// arrived is when p's caller called, as its Store timeout's expiry tells
// (see deadlines), or zero without one: no clock is read per request.
func (p *pending) arrived(timeout time.Duration) time.Time {
	if p.expires.IsZero() {
		return time.Time{}
	}
	return p.expires.Add(-timeout)
}

// watch has the watchdog fire no later than at, with b.mu held. The
// Store's timeout is the same for every request, so a request queued
// later expires later, and the watchdog, once set, is set again only when
// it fires: not once per request.
func (b *batcher) watch(at time.Time) {
	if !b.armed.IsZero() && !at.Before(b.armed) {
		return
	}
	b.armed = at
	d := time.Until(at)
	if b.watchdog == nil {
		b.watchdog = time.AfterFunc(d, b.expire)
	} else {
		b.watchdog.Reset(d)
	}
}

// expire wakes every queued request whose Store timeout for its wait has
// run out, marked abandoned so that no leader sends it, and sets the
// watchdog for the soonest of the rest. A request in a run waits for its
// run, which the store's timeout bounds from its writing.
func (b *batcher) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var next time.Time
	check := func(q *pending, from int32) {
		if q.state.Load() != from || q.expires.IsZero() {
			return
		}
		if now.Before(q.expires) {
			if next.IsZero() || q.expires.Before(next) {
				next = q.expires
			}
			return
		}
		if q.state.CompareAndSwap(from, abandoned) {
			q.wake <- struct{}{} // never blocks: one send per request
		}
	}
	for _, q := range b.queue[b.head:] {
		check(q, waiting)
	}
	b.armed = time.Time{}
	if !next.IsZero() {
		b.watch(next)
	}
}

// abandon marks p given up by its caller, unless it was just made leader
// or done.
func (p *pending) abandon() bool {
	return p.state.CompareAndSwap(waiting, abandoned) || p.state.CompareAndSwap(claimed, abandoned)
}

// gaveUp reports whether p's caller no longer waits for its turn: its
// context is done or the Store's timeout has run out (see stopped).
func (p *pending) gaveUp(ctx context.Context) error {
	if ctx.Err() != nil {
		return stopped(ctx)
	}
	if !p.expires.IsZero() && !time.Now().Before(p.expires) {
		return sluice.ErrShed
	}
	return nil
}

// lead sends p and as much of the queue as fits in one run, then hands
// the rest of the queue to its oldest live waiter. A leader whose own
// caller has given up still sends the others' requests, without its own.
func (b *batcher) lead(ctx context.Context, p *pending) ([]int64, error) {
	gaveUp := p.gaveUp(ctx)
	self := gaveUp == nil
	r := b.claim(p, self)
	batch := r.batch
	var err error
	if len(batch) > 0 {
		err = b.l.write(ctx, b.f, batch, &r.buf, len(batch) == 1 && self)
	}
	b.finish(r)
	answer(batch, p, err)
	own := p.reply
	if err == nil {
		err = p.err // its own request's alone (see run's redo)
	}
	clear(batch)

	b.mu.Lock()
	b.free = append(b.free, r)
	b.endLocked()
	return b.own(gaveUp, own, err)
}

// claim is the run that p leads, self if with p's own request, with as
// much of the queue as fits, counted among the runs out.
func (b *batcher) claim(p *pending, self bool) *run {
	b.mu.Lock()
	defer b.mu.Unlock()
	var r *run
	if n := len(b.free); n > 0 {
		r, b.free = b.free[n-1], b.free[:n-1]
	} else {
		r = new(run)
	}
	batch := r.batch[:0]
	if self {
		batch = append(batch, p)
	}
	for len(batch) < b.l.s.maxBatch {
		q := b.pop()
		if q == nil {
			break
		}
		if q.state.CompareAndSwap(waiting, claimed) {
			batch = append(batch, q)
		}
	}
	r.batch = batch
	r.start = time.Now()
	b.runs = append(b.runs, r)
	return r
}

// finish takes r off the runs out (see stalled), before its requests are
// answered: a caller answered may put its request back in the pool at
// once.
func (b *batcher) finish(r *run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, o := range b.runs {
		if o == r {
			last := len(b.runs) - 1
			b.runs[i], b.runs[last] = b.runs[last], nil
			b.runs = b.runs[:last]
			return
		}
	}
}

// answer wakes the callers of batch's requests but the leader's own (p),
// each with its reply or the run's error err.
func answer(batch []*pending, p *pending, err error) {
	for _, q := range batch {
		if q == p {
			continue
		}
		if err != nil {
			q.err = err
		}
		if q.state.CompareAndSwap(claimed, done) {
			q.wake <- struct{}{}
		}
	}
}

// endLocked ends a run's slot, with b.mu held, which it unlocks: the
// queue goes on in the next run, its leader woken, or the slot is given
// back.
func (b *batcher) endLocked() {
	q := b.next()
	if q == nil {
		b.running--
	}
	b.mu.Unlock()
	if q != nil {
		q.wake <- struct{}{}
	}
}

// next is the queue's oldest live waiter, made leader of the next run in
// place of one that ended, with b.mu held; nil when there is none, or when
// the queue is to wait: another run is out, and the queue would not fill
// a run of its own and that run has not stalled. The caller wakes it, or,
// for nil, gives back the ended run's slot.
func (b *batcher) next() *pending {
	for b.running == 1 || len(b.queue)-b.head >= b.l.s.maxBatch || b.stalled(time.Now()) {
		q := b.pop()
		if q == nil {
			return nil
		}
		if q.state.CompareAndSwap(waiting, leading) {
			return q
		}
	}
	return nil
}

// pop takes the oldest request off the queue, nil if none, with b.mu
// held. The queue is read from head on and starts again at the start of
// its array once empty, so that appending to it reuses the array rather
// than growing a new one as the front is consumed.
func (b *batcher) pop() *pending {
	if b.head == len(b.queue) {
		return nil
	}
	q := b.queue[b.head]
	b.queue[b.head] = nil
	b.head++
	if b.head == len(b.queue) {
		b.queue, b.head = b.queue[:0], 0
	}
	return q
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

// own is the leader's answer: its reply, or why its caller gave up when it
// sent the run without its own request.
func (b *batcher) own(gaveUp error, reply []int64, err error) ([]int64, error) {
	if gaveUp != nil {
		return nil, gaveUp
	}
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// runContext is the context of a run on ctx: its leader's caller's
// values, that caller's cancellation only when the run serves that caller
// alone (own), and the run's deadline dl if hasDL. cancel, if not nil,
// must be called when the run is over.
//
// It is a context of the standard library's, with a timer for the
// deadline, even where the client would honour a bare deadline itself
// (ContextTimeoutEnabled): a context that only reported its deadline,
// never done, kept sluice serve from ever finding the new master after a
// Sentinel failover (TestServeSentinelFailover).
func runContext(ctx context.Context, own bool, dl time.Time, hasDL bool) (context.Context, context.CancelFunc) {
	if !own {
		ctx = context.WithoutCancel(ctx)
	}
	if !hasDL {
		return ctx, nil
	}
	return context.WithDeadline(ctx, dl)
}
