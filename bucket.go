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
// (999983 per day). When the horizon is under wideHorizon, the bucket keeps
// its state under a mutex instead, relative to an origin it moves forward,
// with the last time seen: exact for any idle time, at the cost of a lock.
type bucket struct {
	t    algo.TAT
	x    atomic.Uint64
	wide *wideState // non-nil when the horizon is short
}

// wideHorizon is the least horizon for which the lock-free state is used.
const wideHorizon = 10 * 365 * 24 * time.Hour

type wideState struct {
	mu     sync.Mutex
	origin int64 // Unix ns that x's ticks count from
	last   int64 // the latest time seen, Unix ns
	used   bool
	x      uint64
	rebase int64 // move origin when now is this far past it: a quarter horizon
	refill int64 // an untouched state is full after this long
}

// init prepares b in place (it holds an atomic, so it is not copied).
func (b *bucket) init(l Limit) error {
	t, err := l.tat()
	if err != nil {
		return err
	}
	b.t = t
	if t.Horizon() < wideHorizon {
		b.wide = &wideState{rebase: int64(t.Horizon() / 4), refill: int64(t.RefillTime())}
	}
	return nil
}

// AllowN decides a request of cost n at now. See Algorithm.
func (b *bucket) AllowN(now time.Time, n int64) Decision {
	ns := now.UnixNano()
	if b.wide != nil {
		return b.allowWide(ns, n)
	}
	for {
		x := b.x.Load()
		next, debt, ok := b.t.Take(x, ns, n)
		if next == x || b.x.CompareAndSwap(x, next) {
			remaining, retry, reset := b.t.Fields(debt, n, ok)
			return Decision{Allowed: ok, Limit: b.t.Burst(), Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
		}
	}
}

// allowWide is AllowN on the wide state. It is a function of its own so
// that its lock and defer do not slow the lock-free path.
func (b *bucket) allowWide(ns int64, n int64) Decision {
	w := b.wide
	w.mu.Lock()
	defer w.mu.Unlock()
	d, next := b.t.Step(w.x, w.enter(&b.t, ns), n)
	w.x = next
	return decision(d)
}

// reserve is AllowN for the leaky queue: it also says how long the request
// waits, and returns the state it left for a later refund.
func (b *bucket) reserve(now time.Time, n int64) (Decision, time.Duration, uint64) {
	ns := now.UnixNano()
	if w := b.wide; w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		d, wait, next := b.t.Release(w.x, w.enter(&b.t, ns), n)
		w.x = next
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
		if next, ok := b.t.Refund(w.x, end, n); ok {
			w.x = next
		}
		return
	}
	if next, ok := b.t.Refund(b.x.Load(), end, n); ok {
		b.x.CompareAndSwap(end, next)
	}
}

// enter clamps ns to the last time seen (a clock that goes back is read as
// the last time seen), moves the origin so that times stay far inside the
// horizon, and returns ns relative to the origin. w.mu is held.
func (w *wideState) enter(t *algo.TAT, ns int64) int64 {
	if w.used && ns < w.last {
		ns = w.last
	}
	// Differences in uint64: ns >= last >= origin, and an int64 difference
	// of two hostile times could overflow.
	switch {
	case !w.used || uint64(ns)-uint64(w.last) >= uint64(w.refill):
		// First use, or untouched for a whole refill: the bucket is full.
		w.x, w.origin = 0, ns
	case uint64(ns)-uint64(w.origin) > uint64(w.rebase):
		w.x = t.Shift(w.x, ns-w.origin)
		w.origin = ns
	}
	w.last, w.used = ns, true
	return ns - w.origin
}
