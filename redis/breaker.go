package redis

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// breaker is a circuit breaker: after threshold consecutive failures it
// opens and refuses every call for cooldown, so that a dead Redis costs a
// request nothing; then it lets one probe through (half-open) and closes
// again if the probe succeeds.
type breaker struct {
	threshold int64 // 0: never opens
	cooldown  time.Duration
	clock     sluice.Clock

	fails atomic.Int64 // consecutive failures
	open  atomic.Bool  // fast path: false while closed

	mu      sync.Mutex
	until   time.Time // open until then
	probing bool      // a half-open probe is out
}

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe, whose outcome the caller must report with done.
func (b *breaker) allow() (ok, probe bool) {
	if b.threshold == 0 || !b.open.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true, false
	}
	if b.probing || b.clock.Now().Before(b.until) {
		return false, false
	}
	b.probing = true
	return true, true
}

// done records a call's outcome. failed is false for a success.
func (b *breaker) done(probe, failed bool) {
	if b.threshold == 0 {
		return
	}
	if !failed {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		if probe || b.open.Load() {
			b.mu.Lock()
			b.probing = false
			b.open.Store(false)
			b.mu.Unlock()
		}
		return
	}
	n := b.fails.Add(1)
	if probe || n >= b.threshold {
		b.mu.Lock()
		if probe || !b.open.Load() {
			b.until = b.clock.Now().Add(b.cooldown)
			b.open.Store(true)
		}
		if probe {
			b.probing = false
		}
		b.mu.Unlock()
	}
}

// state is "closed", "open" or "half-open", for Stats.
func (b *breaker) state() string {
	if !b.open.Load() {
		return "closed"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing || !b.clock.Now().Before(b.until) {
		return "half-open"
	}
	return "open"
}

// abort forgets a call that ended without telling anything about Redis:
// its caller gave up. A probe's slot is freed for the next call.
func (b *breaker) abort(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}
