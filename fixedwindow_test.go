package sluice

import (
	"testing"
	"time"
)

func TestFixedWindowSteps(t *testing.T) {
	runTables(t, algorithmsOf(fixedKind), []stepTable{
		{
			// demo_burst: Rate passes, the rest waits for the next window.
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
				one(time.Second, 3, allow(5, 2, time.Second)),
				one(1500*ms, 3, deny(5, 2, 500*ms, 500*ms)),
				one(1500*ms, 6, deny(5, 2, Never, 500*ms)),
				one(1500*ms, -1, deny(5, 2, Never, 500*ms)),
				one(1500*ms, 2, allow(5, 0, 500*ms)),
			),
		},
		{
			// demo_steady: 4/s against 5/s passes whole.
			name:  "steady 4/s",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, time.Second)),
				one(250*ms, 1, allow(5, 3, 750*ms)),
				one(500*ms, 1, allow(5, 2, 500*ms)),
				one(750*ms, 1, allow(5, 1, 250*ms)),
				one(1000*ms, 1, allow(5, 4, time.Second)),
				one(1250*ms, 1, allow(5, 3, 750*ms)),
			),
		},
		{
			// The algorithm's known flaw: 5 at 12:00:00.9 and 5 more at
			// 12:00:01 make 2·Rate in 100ms.
			name:  "burst on both sides of a boundary",
			limit: PerSecond(5),
			steps: steps(
				one(900*ms, 1, allow(5, 4, 100*ms)),
				one(900*ms, 1, allow(5, 3, 100*ms)),
				one(900*ms, 1, allow(5, 2, 100*ms)),
				one(900*ms, 1, allow(5, 1, 100*ms)),
				one(900*ms, 1, allow(5, 0, 100*ms)),
				one(time.Second-1, 1, deny(5, 0, 1, 1)),
				one(time.Second, 1, allow(5, 4, time.Second)),
				one(time.Second, 1, allow(5, 3, time.Second)),
				one(time.Second, 1, allow(5, 2, time.Second)),
				one(time.Second, 1, allow(5, 1, time.Second)),
				one(time.Second, 1, allow(5, 0, time.Second)),
				one(time.Second, 1, deny(5, 0, time.Second, time.Second)),
			),
		},
		{
			// Windows are aligned to the epoch, whatever the rate.
			name:  "7/min",
			limit: PerMinute(7),
			steps: steps(
				one(59*time.Second, 7, allow(7, 0, time.Second)),
				one(59*time.Second, 1, deny(7, 0, time.Second, time.Second)),
				one(time.Minute, 7, allow(7, 0, time.Minute)),
				one(time.Minute+8571428571, 1, deny(7, 0, 51428571429, 51428571429)),
				one(3*time.Minute, 0, allow(7, 7, 0)),
			),
		},
		{
			name:  "clock back",
			limit: PerSecond(2),
			steps: steps(
				one(time.Second, 2, allow(2, 0, time.Second)),
				// 0.5s is in the window before, but the clock never goes
				// back: it counts as 1s.
				one(500*ms, 1, deny(2, 0, time.Second, time.Second)),
				one(2*time.Second, 1, allow(2, 1, time.Second)),
			),
		},
	})
}
