package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Decision is what a limiter says about one request. A denial is a
// Decision with Allowed false, never an error.
type Decision struct {
	Allowed bool
	// Limit is the quota: Burst for the buckets and GCRA, Rate for the
	// windows.
	Limit int64
	// Remaining is the whole units left after this decision, >= 0.
	Remaining int64
	// RetryAfter is 0 if allowed; otherwise the least wait after which the
	// same request would be allowed if nothing else came, or Never.
	RetryAfter time.Duration
	// ResetAfter is the wait until the limiter is back to its idle state.
	ResetAfter time.Duration
	// Cached says a store answered from its local cache of earlier
	// denials (the Redis store's, redis.WithDenyCache) without reaching
	// its shared state: the decision is a remembered one, its waits
	// shifted by the time since. The algorithms and the memory store
	// never set it.
	Cached bool
}

// Algorithm is a single-key limiter. AllowN decides a request of cost n at
// now: allowed requests are charged, denied ones are not. n = 0 is a peek
// that reports the state and consumes nothing; a negative n is refused and
// consumes nothing. Implementations are safe for concurrent use and never
// read a clock.
type Algorithm interface {
	AllowN(now time.Time, n int64) Decision
}

var (
	_ Algorithm = (*TokenBucket)(nil)
	_ Algorithm = (*LeakyBucket)(nil)
	_ Algorithm = (*GCRA)(nil)
	_ Algorithm = (*FixedWindow)(nil)
	_ Algorithm = (*SlidingLog)(nil)
	_ Algorithm = (*SlidingCounter)(nil)
)

func decision(d algo.Decision) Decision { return Decision(d) }
