package redis

import (
	"context"
	"sync"
	"sync/atomic"
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
	args  []any // now, n, number of checks, 8 per check
	reply []int64
	err   error
	state atomic.Int32
	wake  chan struct{} // receives once: leader or done
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
// the rest of the queue to its oldest live waiter.
func (b *batcher) lead(ctx context.Context, p *pending) ([]int64, error) {
	batch := []*pending{p}
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

	// The run serves every request in it: the caller giving up must not
	// cancel it, but its deadline, the earliest (it waited longest),
	// bounds it.
	rctx := ctx
	if len(batch) > 1 {
		rctx = context.WithoutCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			rctx, cancel = context.WithDeadline(rctx, dl)
			defer cancel()
		}
	}
	replies, err := b.s.run(rctx, batch)
	for i, q := range batch[1:] {
		if err != nil {
			q.err = err
		} else {
			q.reply = replies[i+1]
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
			return ownReply(replies, err)
		}
	}
	b.running--
	b.mu.Unlock()
	return ownReply(replies, err)
}

func ownReply(replies [][]int64, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}
