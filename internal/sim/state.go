package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// A Point is one value of a series, at an offset from t=0.
type Point struct {
	At    time.Duration
	Value float64
}

// A Gauge says what an algorithm's state series (Result.State) measures:
// what it holds, read from the decisions and peeks of the replay, so that
// the series is the state the algorithm decided on.
type Gauge struct {
	// Label names the value: "tokens", "count in the window".
	Label string
	// Ms says the values are durations in milliseconds; otherwise they
	// are units of the rate.
	Ms bool
	// Limit is the line the value is held to: the capacity, the rate, or
	// the longest queue; LimitLabel names it.
	Limit      float64
	LimitLabel string
	// Caption says in a sentence or two what to look for in the series.
	Caption string
	// value reads the state from a decision at the time it was made.
	value func(d sluice.Decision) float64
}

// Value is the gauge's reading of a decision (or a peek, of cost 0).
func (g Gauge) Value(d sluice.Decision) float64 { return g.value(d) }

// GaugeOf returns what the state series of a under l measures. Every
// bucket shows its tokens and every window the units it counts, unless
// the algorithm is one whose own state reads better another way: the
// leaky bucket's water, GCRA's theoretical arrival time, the leaky
// queue's queued work.
func GaugeOf(a Algorithm, l sluice.Limit) Gauge {
	capacity := float64(l.Capacity())
	interval := float64(l.Period) / float64(l.Rate) / float64(time.Millisecond) // ms per unit
	// owed is what a bucket has spent and not yet refilled, in units: its
	// debt, the time until it is full again, at Rate per Period.
	owed := func(d sluice.Decision) float64 {
		if d.ResetAfter == sluice.Never {
			return capacity
		}
		return min(capacity, float64(d.ResetAfter)/float64(time.Millisecond)/interval)
	}
	debtMs := func(d sluice.Decision) float64 {
		if d.ResetAfter == sluice.Never {
			return capacity * interval
		}
		return float64(d.ResetAfter) / float64(time.Millisecond)
	}
	used := func(d sluice.Decision) float64 { return float64(l.Rate - d.Remaining) }
	limitText := func(what string, n int64) string { return fmt.Sprintf("%s %d", what, n) }
	window := FmtDur(l.Period)

	switch a.ID {
	case string(sluice.AlgoLeakyBucket):
		return Gauge{Label: "water in the bucket", Limit: capacity, LimitLabel: limitText("capacity", l.Capacity()), value: owed,
			Caption: fmt.Sprintf("The water level: each request pours 1 in, and it leaks %d every %s. A request that would overflow the capacity is denied. It is the token bucket upside down.", l.Rate, window)}
	case string(sluice.AlgoGCRA):
		return Gauge{Label: "TAT − now (ms)", Ms: true, Limit: capacity * interval,
			LimitLabel: fmt.Sprintf("Burst × T = %s", FmtDur(time.Duration(l.Capacity())*l.Period/time.Duration(l.Rate))), value: debtMs,
			Caption: fmt.Sprintf("GCRA keeps one time, the theoretical arrival time (TAT). Each request moves it T = %s later; a request is denied if that would put TAT more than Burst × T ahead of now. TAT − now is the token bucket's spent tokens, measured in time.", FmtDur(l.Period/time.Duration(l.Rate)))}
	case LeakyQueue:
		return Gauge{Label: "wait (ms)", Ms: true, Limit: capacity * interval,
			LimitLabel: fmt.Sprintf("queue of %d = %s", l.Capacity(), FmtDur(time.Duration(l.Capacity())*l.Period/time.Duration(l.Rate))), value: debtMs,
			Caption: fmt.Sprintf("Nothing is sent at once: each dot is an admitted request and how long it waits in the queue, leaving %s after the one before. The line is the work queued ahead of a new arrival; a request that would not fit in the queue is denied.", FmtDur(l.Period/time.Duration(l.Rate)))}
	case string(sluice.AlgoFixedWindow):
		return Gauge{Label: "count in the window", Limit: float64(l.Rate), LimitLabel: limitText("rate", l.Rate), value: used,
			Caption: fmt.Sprintf("The count of the current window of %s: it drops to 0 at each boundary (dashed), so up to twice the rate can pass across one.", window)}
	case string(sluice.AlgoSlidingLog):
		return Gauge{Label: "entries in the log", Limit: float64(l.Rate), LimitLabel: limitText("rate", l.Rate), value: used,
			Caption: fmt.Sprintf("The requests allowed in the last %s: each entry leaves the log %s after it came, one by one, so no span of %s ever holds more than the rate.", window, window, window)}
	case string(sluice.AlgoSlidingCounter):
		return Gauge{Label: "estimate", Limit: float64(l.Rate), LimitLabel: limitText("rate", l.Rate), value: used,
			Caption: "The estimate, in whole requests: the current window's count plus the previous window's, weighted by how much of it the sliding window still covers. It falls smoothly after a boundary, where the fixed window's count drops at once."}
	}
	if a.Bucket {
		return Gauge{Label: "tokens", Limit: capacity, LimitLabel: limitText("capacity", l.Capacity()),
			value:   func(d sluice.Decision) float64 { return capacity - owed(d) },
			Caption: fmt.Sprintf("The tokens in the bucket: each request takes 1, and %d flow back every %s up to the capacity. A request finding less than 1 token is denied.", l.Rate, window)}
	}
	return Gauge{Label: "units counted", Limit: float64(l.Rate), LimitLabel: limitText("rate", l.Rate), value: used,
		Caption: "The units the window counts against the rate."}
}
