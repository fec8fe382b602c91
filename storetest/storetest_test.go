package storetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// naive is the simplest store that can be right: the suite's own model
// under one lock. Its variants are wrong in one way each, to show that the
// suite notices.
type naive struct {
	mu     sync.Mutex
	m      *model
	broken string
}

func (s *naive) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(out) < len(checks) {
		return errors.New("naive: out too short")
	}
	for _, c := range checks {
		if algo.Of(c.Rule) == nil {
			return errors.New("naive: no prepared rule")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.broken {
	case "charge-all": // each check on its own: no all-or-nothing
		for i, c := range checks {
			h := s.m.history(c)
			out[i] = h.decide(c.Rule, now, c.Units())
			h.record(c.Rule, now, c.Units())
		}
		return nil
	case "shadow-blocks": // shadow rules enforced
		cs := make([]sluice.Check, len(checks))
		for i, c := range checks {
			r := c.Rule.Rule()
			r.Shadow = false
			cs[i] = sluice.Check{Rule: prepare(r), Key: c.Key, Cost: c.Cost, Peek: c.Peek}
		}
		copy(out, s.m.take(now, cs))
		return nil
	case "usage-gated", "usage-all-or-nothing": // usage charged as a gate: not when over / not when another check denies
		cs := make([]sluice.Check, len(checks))
		for i, c := range checks {
			r := c.Rule.Rule()
			if s.broken == "usage-gated" || r.Charge == sluice.ChargeGate {
				r.Charge = sluice.ChargeGate
			} else {
				r.Name += "/usage" // its own history, charged all-or-nothing below
			}
			cs[i] = sluice.Check{Rule: prepare(r), Key: c.Key, Cost: c.Cost, Peek: c.Peek}
		}
		if s.broken == "usage-all-or-nothing" {
			return s.allOrNothing(now, cs, out)
		}
		copy(out, s.m.take(now, cs))
		return nil
	case "no-cost": // every check charged one unit, its Cost unread
		cs := make([]sluice.Check, len(checks))
		for i, c := range checks {
			cs[i] = sluice.Check{Rule: c.Rule, Key: c.Key}
		}
		copy(out, s.m.take(now, cs))
		return nil
	}
	copy(out, s.m.take(now, checks))
	for i := range out[:len(checks)] {
		d := &out[i]
		switch s.broken {
		case "retry-early": // RetryAfter a nanosecond short
			if !d.Allowed && d.RetryAfter > 0 && d.RetryAfter != sluice.Never {
				d.RetryAfter--
			}
		case "micro": // durations in whole microseconds, rounded up
			d.RetryAfter, d.ResetAfter = ceilMicro(d.RetryAfter), ceilMicro(d.ResetAfter)
		}
	}
	return nil
}

// allOrNothing decides checks as the model does but undoes the usage
// checks' records too when the request is denied.
func (s *naive) allOrNothing(now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	marks := make(map[*history]int)
	for _, c := range checks {
		h := s.m.history(c)
		marks[h] = len(h.ops)
	}
	copy(out, s.m.take(now, checks))
	allowed := true
	for i, c := range checks {
		allowed = allowed && (c.Rule.Shadow() || out[i].Allowed)
	}
	if !allowed {
		for h, k := range marks {
			h.ops = h.ops[:k]
		}
	}
	return nil
}

func ceilMicro(d time.Duration) time.Duration {
	if d == sluice.Never || d%time.Microsecond == 0 {
		return d
	}
	return d + time.Microsecond - d%time.Microsecond
}

func newNaive(broken string) func(t *testing.T) sluice.Store {
	return func(t *testing.T) sluice.Store {
		return &naive{m: newModel(t, func(r *sluice.PreparedRule) arith { return ownArith(t, r) }), broken: broken}
	}
}

func TestNaive(t *testing.T) {
	Run(t, Config{New: newNaive("")})
}

func TestNaiveMicroseconds(t *testing.T) {
	// A store that answers in whole microseconds, as the Redis store does,
	// passes with Resolution set to match.
	Run(t, Config{New: newNaive("micro"), Resolution: time.Microsecond})
}

// TestBroken runs the suite on each broken variant in a child process and
// checks that it fails, in the parts it should.
func TestBroken(t *testing.T) {
	cases := []struct {
		broken string
		fails  []string // subtests that must fail
	}{
		{"charge-all", []string{"Policy", "AllOrNothing", "Shadow", "ConcurrentPolicy"}},
		{"shadow-blocks", []string{"Policy", "Shadow"}},
		{"retry-early", []string{"Trace", "Policy"}},
		{"no-cost", []string{"Policy"}},
		{"usage-gated", []string{"UsageTrace", "UsagePolicy", "UsageLLM", "UsageCap", "UsageMixed", "UsageZero", "UsageConcurrent"}},
		{"usage-all-or-nothing", []string{"UsagePolicy", "UsageMixed"}},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSuiteOnBroken$", "-test.count=1", "-test.v", "-test.timeout=1m")
			cmd.Env = append(os.Environ(), "STORETEST_BROKEN="+c.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed the %s store:\n%s", c.broken, out)
			}
			for _, sub := range c.fails {
				if !strings.Contains(string(out), "--- FAIL: TestSuiteOnBroken/"+sub+" ") {
					t.Errorf("the suite on the %s store did not fail %s:\n%s", c.broken, sub, tail(out))
				}
			}
		})
	}
}

func TestSuiteOnBroken(t *testing.T) {
	b := os.Getenv("STORETEST_BROKEN")
	if b == "" {
		t.Skip("run by TestBroken in a child process")
	}
	Run(t, Config{New: newNaive(b)})
}

func tail(b []byte) string {
	const n = 4000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
