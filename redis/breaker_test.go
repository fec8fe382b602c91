package redis

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

func TestBreaker(t *testing.T) {
	clk := testclock.New(time.Unix(1e9, 0))
	b := &breaker{threshold: 3, cooldown: time.Second, clock: clk}
	type step struct {
		advance     time.Duration
		fail        bool // the outcome reported when allowed
		ok, probe   bool // want from allow
		state       string
		description string
	}
	steps := []step{
		{fail: true, ok: true, state: "closed", description: "first failure"},
		{fail: false, ok: true, state: "closed", description: "a success resets the count"},
		{fail: true, ok: true, state: "closed"},
		{fail: true, ok: true, state: "closed"},
		{fail: true, ok: true, state: "open", description: "third consecutive failure opens"},
		{ok: false, state: "open", description: "open: refused"},
		{advance: 999 * time.Millisecond, ok: false, state: "open"},
		{advance: time.Millisecond, fail: true, ok: true, probe: true, state: "open", description: "the probe fails: open again"},
		{advance: 500 * time.Millisecond, ok: false, state: "open"},
		{advance: 500 * time.Millisecond, fail: false, ok: true, probe: true, state: "closed", description: "the probe succeeds"},
		{fail: true, ok: true, state: "closed"},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		ok, probe := b.allow()
		if ok != s.ok || probe != s.probe {
			t.Fatalf("step %d (%s): allow = %v, %v; want %v, %v", i, s.description, ok, probe, s.ok, s.probe)
		}
		if ok {
			b.done(probe, s.fail)
		}
		if got := b.state(); got != s.state {
			t.Fatalf("step %d (%s): state %s, want %s", i, s.description, got, s.state)
		}
	}
}

// TestBreakerOneProbe: while a probe is out, the others are refused.
func TestBreakerOneProbe(t *testing.T) {
	clk := testclock.New(time.Unix(1e9, 0))
	b := &breaker{threshold: 1, cooldown: time.Second, clock: clk}
	b.done(false, true)
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
