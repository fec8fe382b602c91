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

// maxBatch bounds the requests of one script run, and so the time Redis
// spends in it.
const maxBatch = 64

// leaders is how many script runs may be out at once: one on the wire
// while the next is being built.
const leaders = 2

// pending is one request, queued or in a run.
type pending struct {
	keys  []string
	now   float64   // µs, or redisTime
	n     int64     // cost
	ps    []*params // one per check
	reply []int64
	err   error
	state atomic.Int32
	wake  chan struct{} // receives once: leader or done
	// deadline is its caller's, zero for none: a run serving several
	// callers is bounded by the latest of theirs, not by its leader's.
	deadline time.Time
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

// take decides p, alone or with others, within ctx.
func (b *batcher) take(ctx context.Context, p *pending) ([]int64, error) {
	p.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	if b.running < leaders {
		b.running++
		b.mu.Unlock()
		return b.lead(ctx, p)
	}
	p.wake = make(chan struct{}, 1)
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case <-p.wake:
	case <-ctx.Done():
		if p.state.CompareAndSwap(waiting, abandoned) || p.state.CompareAndSwap(claimed, abandoned) {
			return nil, ctx.Err()
		}
		<-p.wake // made leader or done just now
	}
	if p.state.Load() == leading {
		return b.lead(ctx, p)
	}
	return p.reply, p.err
}

// lead sends p and as much of the queue as fits in one run, then hands
// the rest of the queue to its oldest live waiter. A leader whose own
// caller has given up still sends the others' requests, without its own.
func (b *batcher) lead(ctx context.Context, p *pending) ([]int64, error) {
	self := ctx.Err() == nil
	var batch []*pending
	if self {
		batch = append(batch, p)
	}
	b.mu.Lock()
	for len(b.queue) > 0 && len(batch) < maxBatch {
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
	switch {
	case len(batch) == 0:
	case len(batch) == 1 && self:
		replies, err = b.s.run(ctx, batch)
	default:
		// The run serves every request in it: no one caller giving up may
		// cancel it, and it lasts until the latest deadline among them
		// (each caller still stops waiting at its own).
		rctx := context.WithoutCancel(ctx)
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
			return b.own(ctx, self, replies, err)
		}
	}
	b.running--
	b.mu.Unlock()
	return b.own(ctx, self, replies, err)
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

// own is the leader's answer: its reply, first in the batch, or its
// caller's error when it sent the run without its own request.
func (b *batcher) own(ctx context.Context, self bool, replies [][]int64, err error) ([]int64, error) {
	if !self {
		return nil, ctx.Err()
	}
	return ownReply(replies, err)
}

func ownReply(replies [][]int64, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}
