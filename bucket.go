package sluice

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// bucket is the lock-free state of the token bucket, the leaky bucket and
// GCRA: one uint64 (GCRA's theoretical arrival time, in ticks) updated by
// compare-and-swap. See internal/algo for the arithmetic.
type bucket struct {
	t algo.TAT
	x atomic.Uint64
}

// Unlike the window algorithms, which keep their state as a plain struct,
// the bucket keeps it in an atomic and so is built in place.
func (b *bucket) init(l Limit) error {
	t, err := l.tat()
	b.t = t
	return err
}

// AllowN decides a request of cost n at now. See Algorithm.
func (b *bucket) AllowN(now time.Time, n int64) Decision {
	ns := now.UnixNano()
	for {
		x := b.x.Load()
		d, next := b.t.Step(x, ns, n)
		if next == x || b.x.CompareAndSwap(x, next) {
			return decision(d)
		}
	}
}
