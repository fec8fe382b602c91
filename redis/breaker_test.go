package redis

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

// calls reports n calls' outcomes to b, failed or not, each allowed.
func calls(t *testing.T, b *breaker, n int, failed bool) {
	t.Helper()
	for range n {
		ok, probe := b.allow()
		if !ok || probe {
			t.Fatalf("allow = %v, %v while %s; want a plain call", ok, probe, b.state())
		}
		b.done(false, failed, 1)
	}
}

// TestBreakerErrorRate: the breaker opens when, over the last 10 s, at
// least 20 calls reached Redis and at least half of them failed; never
// on fewer calls, a lower rate, or failures older than the window.
func TestBreakerErrorRate(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	t.Run("fewer than 20 calls", func(t *testing.T) {
		b := &breaker{minCalls: 20, cooldown: time.Second, clock: testclock.New(t0)}
		calls(t, b, 19, true)
		if got := b.state(); got != "closed" {
			t.Fatalf("after 19 failures of 19 calls: %s, want closed", got)
		}
		calls(t, b, 1, true)
		if got := b.state(); got != "open" {
			t.Fatalf("after 20 failures of 20 calls: %s, want open", got)
		}
	})
	t.Run("below half", func(t *testing.T) {
		clk := testclock.New(t0)
		b := &breaker{minCalls: 20, cooldown: time.Second, clock: clk}
		// 9 of 19 for a long while, spread over the window
		for range 30 {
			calls(t, b, 10, false)
			calls(t, b, 9, true)
			clk.Advance(700 * time.Millisecond)
		}
		if got := b.state(); got != "closed" {
			t.Fatalf("9 failures in 19 calls, sustained: %s, want closed", got)
		}
		if n := b.opens.Load(); n != 0 {
			t.Fatalf("opened %d times", n)
		}
	})
	t.Run("half", func(t *testing.T) {
		clk := testclock.New(t0)
		b := &breaker{minCalls: 20, cooldown: time.Second, clock: clk}
		calls(t, b, 10, false)
		clk.Advance(3 * time.Second)
		calls(t, b, 9, true)
		clk.Advance(3 * time.Second)
		calls(t, b, 1, true)
		if got := b.state(); got != "open" {
			t.Fatalf("10 failures of 20 calls within 10s: %s, want open", got)
		}
	})
	t.Run("window slides", func(t *testing.T) {
		clk := testclock.New(t0)
		b := &breaker{minCalls: 20, cooldown: time.Second, clock: clk}
		calls(t, b, 15, true)
		clk.Advance(10 * time.Second) // those 15 leave the window
		calls(t, b, 10, false)
		calls(t, b, 9, true)
		if got := b.state(); got != "closed" {
			t.Fatalf("9 failures of 19 calls in the window, 15 older: %s, want closed", got)
		}
		calls(t, b, 1, true)
		if got := b.state(); got != "open" {
			t.Fatalf("10 of 20 in the window: %s, want open", got)
		}
	})
}

// TestBreakerProbe: open, the breaker refuses calls for its cooldown, then
// lets one probe through; a failed probe opens it again, a successful one
// closes it with a fresh count.
func TestBreakerProbe(t *testing.T) {
	clk := testclock.New(time.Unix(1e9, 0))
	b := &breaker{minCalls: 20, cooldown: time.Second, clock: clk}
	calls(t, b, 20, true)
	type step struct {
		advance     time.Duration
		fail        bool // the outcome reported when allowed
		ok, probe   bool // want from allow
		state       string
		description string
	}
	steps := []step{
		{ok: false, state: "open", description: "open: refused"},
		{advance: 999 * time.Millisecond, ok: false, state: "open"},
		{advance: time.Millisecond, fail: true, ok: true, probe: true, state: "open", description: "the probe fails: open again"},
		{advance: 500 * time.Millisecond, ok: false, state: "open"},
		{advance: 500 * time.Millisecond, fail: false, ok: true, probe: true, state: "closed", description: "the probe succeeds"},
		{fail: true, ok: true, state: "closed", description: "a fresh count: one failure does not open"},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		ok, probe := b.allow()
		if ok != s.ok || probe != s.probe {
			t.Fatalf("step %d (%s): allow = %v, %v; want %v, %v", i, s.description, ok, probe, s.ok, s.probe)
		}
		if ok {
			b.done(probe, s.fail, 1)
		}
		if got := b.state(); got != s.state {
			t.Fatalf("step %d (%s): state %s, want %s", i, s.description, got, s.state)
		}
	}
	if n := b.opens.Load(); n != 1 {
		t.Fatalf("opened %d times, want 1 (a failed probe reopens, it does not count)", n)
	}
}

// TestBreakerOneProbe: while a probe is out, the others are refused.
func TestBreakerOneProbe(t *testing.T) {
	clk := testclock.New(time.Unix(1e9, 0))
	b := &breaker{minCalls: 1, cooldown: time.Second, clock: clk}
	b.done(false, true, 1)
	clk.Advance(time.Second)
	if ok, probe := b.allow(); !ok || !probe {
		t.Fatalf("first call after the cooldown: %v, %v; want the probe", ok, probe)
	}
	if ok, _ := b.allow(); ok {
		t.Fatal("second call while the probe is out: allowed")
	}
	b.abort(true)
	if ok, probe := b.allow(); !ok || !probe {
		t.Fatalf("after an aborted probe: %v, %v; want another probe", ok, probe)
	}
}
