package sluice

import (
	"errors"
	"testing"
	"time"
)

func TestSlidingLogSteps(t *testing.T) {
	runTables(t, algorithmsOf(logKind), []stepTable{
		{
			// demo_burst: Rate passes; the rest waits until the first
			// request leaves the window (now-1s, now].
			name:  "burst of 10 at t0",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, time.Second)),
				one(0, 1, allow(5, 3, time.Second)),
				one(0, 1, allow(5, 2, time.Second)),
				one(0, 1, allow(5, 1, time.Second)),
				one(0, 1, allow(5, 0, time.Second)),
				repeat(5, step{0, 1, deny(5, 0, time.Second, time.Second)}),
				one(999999999, 1, deny(5, 0, 1, 1)),
				one(time.Second, 0, allow(5, 5, 0)),
				one(time.Second, 2, allow(5, 3, time.Second)),
				one(1100*ms, 2, allow(5, 1, time.Second)),
				// 2 more fit once the 2 of t0+1s have left.
				one(1200*ms, 2, deny(5, 1, 800*ms, 900*ms)),
				one(1200*ms, 6, deny(5, 1, Never, 900*ms)),
				one(1200*ms, -1, deny(5, 1, Never, 900*ms)),
				one(1200*ms, 1, allow(5, 0, time.Second)),
				// To fit 5, all three entries must leave.
				one(1300*ms, 5, deny(5, 0, 900*ms, 900*ms)),
				one(2*time.Second, 5, deny(5, 2, 200*ms, 200*ms)),
				one(2200*ms, 5, allow(5, 0, time.Second)),
			),
		},
		{
			// demo_steady: 4/s against 5/s passes whole; the log holds the
			// last second's 4 or 5.
			name:  "steady 4/s",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, time.Second)),
				one(250*ms, 1, allow(5, 3, time.Second)),
				one(500*ms, 1, allow(5, 2, time.Second)),
				one(750*ms, 1, allow(5, 1, time.Second)),
				one(1000*ms, 1, allow(5, 1, time.Second)),
				one(1250*ms, 1, allow(5, 1, time.Second)),
			),
		},
		{
			// The window slides: 5 just before a boundary keep the 5 on it
			// out until they have been in the window for a whole period.
			name:  "burst on both sides of a boundary",
			limit: PerSecond(5),
			steps: steps(
				one(900*ms, 5, allow(5, 0, time.Second)),
				repeat(5, step{time.Second, 1, deny(5, 0, 900*ms, 900*ms)}),
				one(1900*ms-1, 1, deny(5, 0, 1, 1)),
				one(1900*ms, 1, allow(5, 4, time.Second)),
				one(1900*ms, 4, allow(5, 0, time.Second)),
			),
		},
		{
			name:  "3/s",
			limit: PerSecond(3),
			steps: steps(
				one(0, 1, allow(3, 2, time.Second)),
				one(333333333, 1, allow(3, 1, time.Second)),
				one(666666667, 1, allow(3, 0, time.Second)),
				one(time.Second-1, 1, deny(3, 0, 1, 666666668)),
				one(time.Second, 1, allow(3, 0, time.Second)),
				one(time.Second, 1, deny(3, 0, 333333333, time.Second)),
				one(1333333333, 1, allow(3, 0, time.Second)),
			),
		},
		{
			name:  "clock back",
			limit: PerSecond(2),
			steps: steps(
				one(time.Second, 2, allow(2, 0, time.Second)),
				one(500*ms, 1, deny(2, 0, time.Second, time.Second)),
				one(2*time.Second, 1, allow(2, 1, time.Second)),
			),
		},
	})
}

// TestSlidingLogTooLarge: the log keeps a cell per unit, so its rate is
// bounded; the sliding counter takes the same limit.
func TestSlidingLogTooLarge(t *testing.T) {
	if _, err := NewSlidingLog(PerSecond(1 << 20)); err != nil {
		t.Errorf("NewSlidingLog(PerSecond(2^20)): %v", err)
	}
	l := PerSecond(1<<20 + 1)
	if x, err := NewSlidingLog(l); !errors.Is(err, ErrLimitTooLarge) || x != nil {
		t.Errorf("NewSlidingLog(%v) = %v, %v; want nil, an error wrapping ErrLimitTooLarge", l, x, err)
	}
	if _, err := NewSlidingCounter(l); err != nil {
		t.Errorf("NewSlidingCounter(%v): %v", l, err)
	}
}
