package sluice

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// bucket is the state of the token bucket, the leaky bucket (meter and
// queue) and GCRA: GCRA's theoretical arrival time, in ticks of 1/q ns
// (see internal/algo). For most limits it is one uint64 updated by
// compare-and-swap, lock-free.
//
// Ticks are read exactly only within a horizon of 2^62 ticks, 146 years
// for a rate that divides its period but hours for an odd high rate
// (49999 per day). When the horizon is under ten years, the bucket keeps
// its state as an algo.Wide under a mutex instead: relative to an origin it
// moves forward, with the last time seen, exact for any idle time, at the
// cost of a lock.
type bucket struct {
	t    algo.TAT
	x    atomic.Uint64
	wide *wideState // non-nil when the horizon is short
}

// wideState is the bucket's state when its horizon is short: algo.Wide,
// which stays exact however long it sits untouched, under a lock.
type wideState struct {
	mu sync.Mutex
	s  algo.Wide
}

// init prepares b in place (it holds an atomic, so it is not copied).
func (b *bucket) init(l Limit) error {
	t, err := l.tat()
	if err != nil {
		return err
	}
	b.t = t
	if t.NeedsWide() {
		b.wide = new(wideState)
	}
	return nil
}

// AllowN decides a request of cost n at now. See Algorithm.
func (b *bucket) AllowN(now time.Time, n int64) Decision {
	ns := now.UnixNano()
	if b.wide != nil {
		return b.allowWide(ns, n)
	}
	ok, remaining, retry, reset := b.t.Allow(&b.x, ns, n)
	return Decision{Allowed: ok, Limit: b.t.Burst(), Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// allowWide is AllowN on the wide state. It is a function of its own so
// that its lock and defer do not slow the lock-free path.
func (b *bucket) allowWide(ns int64, n int64) Decision {
	w := b.wide
	w.mu.Lock()
	defer w.mu.Unlock()
	at := b.t.Enter(&w.s, ns) // before reading X, which Enter may move
	d, next := b.t.Step(w.s.X, at, n)
	w.s.X = next
	return decision(d)
}

// reserve is AllowN for the leaky queue: it also says how long the request
// waits, and returns the state it left for a later refund.
func (b *bucket) reserve(now time.Time, n int64) (Decision, time.Duration, uint64) {
	ns := now.UnixNano()
	if w := b.wide; w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		at := b.t.Enter(&w.s, ns) // before reading X, which Enter may move
		d, wait, next := b.t.Release(w.s.X, at, n)
		w.s.X = next
		return decision(d), wait, next
	}
	for {
		x := b.x.Load()
		d, wait, next := b.t.Release(x, ns, n)
		if next == x || b.x.CompareAndSwap(x, next) {
			return decision(d), wait, next
		}
	}
}

// refund gives back n units of a reservation that left the state at end,
// if nothing has changed it since.
func (b *bucket) refund(end uint64, n int64) {
	if w := b.wide; w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		if next, ok := b.t.Refund(w.s.X, end, n); ok {
			w.s.X = next
		}
		return
	}
	if next, ok := b.t.Refund(b.x.Load(), end, n); ok {
		b.x.CompareAndSwap(end, next)
	}
}
