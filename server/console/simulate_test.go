package console

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sim"
)

// However many arrivals, each state series, and the leaky queue's waits,
// hold at most MaxSimStatePoints points, in time order, and keep the
// extremes of the full series.
func TestSimulateSeriesBounded(t *testing.T) {
	l := sluice.Limit{Rate: 50, Period: time.Second, Burst: 80}
	at, err := sim.Poisson(400, 100*time.Second, 5, MaxSimArrivals)
	if err != nil {
		t.Fatal(err)
	}
	var algs []sim.Algorithm
	for _, id := range []string{"token_bucket", "sliding_counter", sim.LeakyQueue} {
		a, _ := sim.FindAlgorithm(id)
		algs = append(algs, a)
	}
	resp, err := simulate(t.Context(), algs, l, at)
	if err != nil {
		t.Fatal(err)
	}
	samples := make([]time.Duration, len(resp.Start))
	for i, ms := range resp.Start {
		samples[i] = time.Duration(ms * float64(time.Millisecond))
	}
	for i, r := range resp.Results {
		full, err := sim.Trace(t.Context(), algs[i], l, at, samples)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := full.State[0].Value, full.State[0].Value
		for _, p := range full.State {
			lo, hi = min(lo, p.Value), max(hi, p.Value)
		}
		series := []simSeries{r.State.simSeries}
		if r.Waits != nil {
			series = append(series, *r.Waits)
		}
		for _, s := range series {
			if n := len(s.T); n == 0 || n > MaxSimStatePoints || n != len(s.V) || !slices.IsSorted(s.T) {
				t.Errorf("%s: a series of %d times and %d values, want 1 to %d, in time order", r.ID, n, len(s.V), MaxSimStatePoints)
			}
		}
		if got := r.State.V; slices.Min(got) != lo || slices.Max(got) != hi {
			t.Errorf("%s: state from %v to %v, want the full series' %v to %v", r.ID, slices.Min(got), slices.Max(got), lo, hi)
		}
		if r.State.Label == "" || r.State.Caption == "" || r.State.Limit <= 0 {
			t.Errorf("%s: state %q, caption %q, limit %v", r.ID, r.State.Label, r.State.Caption, r.State.Limit)
		}
	}
	if resp.Results[2].Waits == nil || resp.Results[0].Waits != nil {
		t.Error("only the leaky queue has waits")
	}
}
