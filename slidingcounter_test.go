package sluice

import (
	"testing"
	"time"
)

func TestSlidingCounterSteps(t *testing.T) {
	runTables(t, algorithmsOf(counterKind), []stepTable{
		{
			// demo_burst: Rate passes. The next request fits when the
			// previous window's weight falls below Rate: 1ns into the next
			// window, 5·(1s-1ns)/1s < 5.
			name:  "burst of 10 at t0",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, 2*time.Second)),
				one(0, 1, allow(5, 3, 2*time.Second)),
				one(0, 1, allow(5, 2, 2*time.Second)),
				one(0, 1, allow(5, 1, 2*time.Second)),
				one(0, 1, allow(5, 0, 2*time.Second)),
				repeat(5, step{0, 1, deny(5, 0, time.Second+1, 2*time.Second)}),
				one(time.Second, 1, deny(5, 0, 1, time.Second)),
				one(time.Second+1, 1, allow(5, 0, 2*time.Second-1)),
				// 5·(1s-off)/1s + 1 < 5 from off = 200ms+1ns.
				one(time.Second+1, 1, deny(5, 0, 200*ms, 2*time.Second-1)),
				one(1200*ms, 1, deny(5, 0, 1, 1800*ms)),
				one(1200*ms+1, 1, allow(5, 0, 1800*ms-1)),
				one(1200*ms+1, 6, deny(5, 0, Never, 1800*ms-1)),
				one(1200*ms+1, -1, deny(5, 0, Never, 1800*ms-1)),
				one(3*time.Second, 0, allow(5, 5, 0)),
				one(3*time.Second, 5, allow(5, 0, 2*time.Second)),
				// n units fit iff estimate + n - 1 < Rate: 5 fit again only
				// when the estimate is below 1.
				one(4*time.Second, 5, deny(5, 0, 800*ms+1, time.Second)),
				one(4800*ms, 5, deny(5, 4, 1, 200*ms)),
				one(4800*ms+1, 5, allow(5, 0, 2*time.Second-800*ms-1)),
			),
		},
		{
			// demo_steady: 4/s against 5/s passes whole, the estimate
			// staying at 4 before each request.
			name:  "steady 4/s",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, 2*time.Second)),
				one(250*ms, 1, allow(5, 3, 1750*ms)),
				one(500*ms, 1, allow(5, 2, 1500*ms)),
				one(750*ms, 1, allow(5, 1, 1250*ms)),
				one(1000*ms, 1, allow(5, 0, 2*time.Second)),
				one(1250*ms, 1, allow(5, 0, 1750*ms)),
				one(1500*ms, 1, allow(5, 0, 1500*ms)),
				one(1750*ms, 1, allow(5, 0, 1250*ms)),
				one(2000*ms, 1, allow(5, 0, 2*time.Second)),
			),
		},
		{
			// The previous window's weight stops the second burst that the
			// fixed window lets through, and lets requests back in as it
			// fades.
			name:  "burst on both sides of a boundary",
			limit: PerSecond(5),
			steps: steps(
				one(900*ms, 1, allow(5, 4, 1100*ms)),
				one(900*ms, 1, allow(5, 3, 1100*ms)),
				one(900*ms, 1, allow(5, 2, 1100*ms)),
				one(900*ms, 1, allow(5, 1, 1100*ms)),
				one(900*ms, 1, allow(5, 0, 1100*ms)),
				repeat(5, step{time.Second, 1, deny(5, 0, 1, time.Second)}),
				one(1500*ms, 1, allow(5, 2, 1500*ms)),
				one(1500*ms, 1, allow(5, 1, 1500*ms)),
				one(1500*ms, 1, allow(5, 0, 1500*ms)),
				one(1500*ms, 1, deny(5, 0, 100*ms+1, 1500*ms)),
			),
		},
		{
			// 3/s: the previous window's weight falls by 3 per 10^9 ns, so
			// the fits land on odd nanoseconds.
			name:  "3/s",
			limit: PerSecond(3),
			steps: steps(
				one(0, 3, allow(3, 0, 2*time.Second)),
				one(0, 1, deny(3, 0, time.Second+1, 2*time.Second)),
				one(time.Second+1, 1, allow(3, 0, 2*time.Second-1)),
				one(time.Second+1, 1, deny(3, 0, 333333333, 2*time.Second-1)),
				one(time.Second+333333333, 1, deny(3, 0, 1, 1666666667)),
				one(time.Second+333333334, 1, allow(3, 0, 1666666666)),
			),
		},
		{
			name:  "clock back",
			limit: PerSecond(2),
			steps: steps(
				one(time.Second, 2, allow(2, 0, 2*time.Second)),
				one(500*ms, 1, deny(2, 0, time.Second+1, 2*time.Second)),
				one(2*time.Second, 0, allow(2, 0, time.Second)),
			),
		},
	})
}
