package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Epoch is the replays' fixed date: Start moves it back to a multiple of
// the period so that t=0 is a fixed-window boundary.
var Epoch = time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)

// Start is t=0 for a replay under a limit of the given period: Epoch,
// moved back to a fixed-window boundary. Windows are aligned to the Unix
// epoch (time.Truncate counts from the zero time instead).
func Start(period time.Duration) time.Time {
	ns := Epoch.UnixNano()
	return time.Unix(0, ns-ns%int64(period)).UTC()
}

// A Scenario is one of the demo's traffic patterns: requests of cost 1, as
// offsets from t=0, made for a limit.
type Scenario struct {
	Name string
	// Arrivals lists the requests' times for the limit l, in order.
	Arrivals func(l sluice.Limit) []time.Duration
	// Describe says in a sentence what the client does.
	Describe func(l sluice.Limit, at []time.Duration) string
}

// Scenarios are the demo's three: a burst, a steady stream and a fixed
// window's boundary.
var Scenarios = []Scenario{
	{
		Name: "burst",
		Arrivals: func(l sluice.Limit) []time.Duration {
			return make([]time.Duration, 2*max(l.Rate, l.Capacity()))
		},
		Describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("An idle client sends %d requests at once, at t=0.", len(at))
		},
	},
	{
		Name: "steady",
		Arrivals: func(l sluice.Limit) []time.Duration {
			// 0.8 of the rate: an interval of 5/4 the emission interval.
			step := 5 * l.Period / time.Duration(4*l.Rate)
			at := make([]time.Duration, 4*l.Rate)
			for i := range at {
				at[i] = time.Duration(i) * step
			}
			return at
		},
		Describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("A client sends %d requests, one every %s, within the rate.", len(at), FmtDur(at[1]-at[0]))
		},
	},
	{
		Name: "boundary",
		Arrivals: func(l sluice.Limit) []time.Duration {
			at := make([]time.Duration, 2*l.Rate)
			for i := range at {
				at[i] = l.Period
				if int64(i) < l.Rate {
					at[i] -= l.Period / 10
				}
			}
			return at
		},
		Describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("A client sends %s at t=%s, just before the fixed window's boundary at t=%s, and %d more on it.",
				plural(l.Rate, "request"), FmtDur(l.Period-l.Period/10), FmtDur(l.Period), l.Rate)
		},
	},
}

// FindScenario returns the scenario called name.
func FindScenario(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
