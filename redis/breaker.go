package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// guard is a sender behind the circuit breaker: while the breaker is
// open it refuses a request at once (ErrCircuitOpen), and it tells the
// breaker how each request it let through went (see breaker.report).
type guard struct {
	br       *breaker
	rejected *atomic.Int64 // requests refused
	next     sender
}

func (g *guard) send(ctx context.Context, f flavour, p *pending) ([]int64, error) {
	ok, probe := g.br.allow()
	if !ok {
		g.rejected.Add(1)
		return nil, ErrCircuitOpen
	}
	reply, err := g.next.send(ctx, f, p)
	g.br.report(ctx, probe, p.wrote.Load(), err)
	return reply, err
}

// breakerWindow is how far back the breaker looks, in breakerSlots slots
// of a second each: long enough that a second of trouble under load is
// not taken for a dead Redis, short enough that a dead one is found in
// seconds.
const (
	breakerSlots  = 10
	breakerWindow = breakerSlots * time.Second
)

// breaker is a circuit breaker on the error rate of the calls that
// reached Redis: it opens when, over the last breakerWindow, at least
// minCalls calls were written to Redis and at least half of them failed
// (an error reply, a refused or broken connection, no answer within the
// store's timeout from a Redis silent for a second: see Store.loaded).
// Open, it refuses every call for cooldown, so that a dead Redis costs a
// request nothing; then it lets one probe through (half-open), closes
// again if the probe succeeds and opens again if it fails. A call shed
// or given up by its caller tells it nothing.
type breaker struct {
	minCalls int64 // 0: never opens
	cooldown time.Duration
	clock    sluice.Clock

	open  atomic.Bool // fast path: false while closed
	opens atomic.Int64

	mu      sync.Mutex
	slots   [breakerSlots]breakerSlot
	until   time.Time // open until then
	probing bool      // a half-open probe is out
}

// breakerSlot counts the calls of one second, sec in Unix seconds.
type breakerSlot struct {
	sec          int64
	calls, fails int64
}

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe, whose outcome the caller must report with done (or
// abort, if it never reaches Redis).
func (b *breaker) allow() (ok, probe bool) {
	if b.minCalls == 0 || !b.open.Load() {
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

// done records the outcome of n calls written to Redis: failed is false
// for an answer. probe says whether they carried the half-open probe.
func (b *breaker) done(probe, failed bool, n int64) {
	if b.minCalls == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if probe {
		b.probing = false
		if failed {
			b.until = now.Add(b.cooldown)
		} else {
			b.open.Store(false)
		}
		return
	}
	if b.open.Load() {
		return // a call out since before it opened: the probe decides
	}
	sec := now.Unix()
	sl := &b.slots[uint64(sec)%breakerSlots]
	if sl.sec != sec {
		*sl = breakerSlot{sec: sec}
	}
	sl.calls += n
	if failed {
		sl.fails += n
	} else {
		return // a success never opens it
	}
	var calls, fails int64
	for i := range b.slots {
		if s := &b.slots[i]; s.sec > sec-breakerSlots {
			calls += s.calls
			fails += s.fails
		}
	}
	if calls >= b.minCalls && 2*fails >= calls {
		b.slots = [breakerSlots]breakerSlot{} // a new count once it closes
		b.until = now.Add(b.cooldown)
		b.open.Store(true)
		b.opens.Add(1)
	}
}

// report tells the breaker how a request it let through went: answered
// (its slot having moved is an answer), failed, or ended without telling
// anything about Redis: never written, shed (a timeout under load, see
// Store.loaded), or given up by its caller.
func (b *breaker) report(ctx context.Context, probe, wrote bool, err error) {
	switch {
	case err == nil || err == errMoved:
		b.done(probe, false, 1)
	case !wrote || errors.Is(err, sluice.ErrShed) || errors.Is(err, context.Canceled) ||
		ctx.Err() != nil && errors.Is(err, ctx.Err()):
		b.abort(probe)
	default:
		b.done(probe, true, 1)
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
// it was never written, or its caller gave up. A probe's slot is freed
// for the next call.
func (b *breaker) abort(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}
