package sim

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The boundary scenario at 5/1s: the fixed window passes twice its rate
// across its boundary, every other algorithm its rate.
func TestRunBoundary(t *testing.T) {
	l := sluice.PerSecond(5)
	s, _ := FindScenario("boundary")
	at := s.Arrivals(l)
	for _, a := range Algorithms {
		r, err := Run(t.Context(), a, l, at)
		if err != nil {
			t.Fatalf("Run(%s): %v", a.ID, err)
		}
		want := l.Rate
		if a.ID == string(sluice.AlgoFixedWindow) {
			want = 2 * l.Rate
		}
		if r.Passed != want || r.Denied() != int64(len(at))-want {
			t.Errorf("Run(%s) passed %d, denied %d; want %d, %d", a.ID, r.Passed, r.Denied(), want, int64(len(at))-want)
		}
	}
}

// t=0 is a fixed-window boundary, whatever the period.
func TestStartIsABoundary(t *testing.T) {
	for _, p := range []time.Duration{time.Millisecond, 7 * time.Second, time.Minute, 24 * time.Hour, 365 * 24 * time.Hour} {
		if s := Start(p); s.UnixNano()%int64(p) != 0 || s.After(Epoch) {
			t.Errorf("Start(%v) = %v, not a boundary at or before %v", p, s, Epoch)
		}
	}
}

func TestPoisson(t *testing.T) {
	a, err := Poisson(100, 10*time.Second, 7, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Poisson(100, 10*time.Second, 7, 100_000)
	c, _ := Poisson(100, 10*time.Second, 8, 100_000)
	if !slices.Equal(a, b) {
		t.Error("two Poisson streams with one seed differ")
	}
	if slices.Equal(a, c) {
		t.Error("two Poisson streams with different seeds are the same")
	}
	if n := len(a); n < 850 || n > 1150 {
		t.Errorf("100/s over 10s made %d arrivals, want about 1000", n)
	}
	if !slices.IsSorted(a) || a[0] < 0 || a[len(a)-1] >= 10*time.Second {
		t.Errorf("arrivals not sorted within [0, 10s): first %v, last %v", a[0], a[len(a)-1])
	}
	if _, err := Poisson(1000, time.Hour, 1, 100_000); err == nil {
		t.Error("Poisson past the limit: nil error")
	}
	for _, rate := range []float64{0, -1} {
		if _, err := Poisson(rate, time.Second, 1, 10); err == nil {
			t.Errorf("Poisson(rate %v): nil error", rate)
		}
	}
}

// A replay whose context has ended stops.
func TestRunContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	a, _ := FindAlgorithm("gcra")
	if _, err := Run(ctx, a, sluice.PerSecond(5), make([]time.Duration, 10_000)); err == nil {
		t.Error("Run with an ended context: nil error")
	}
}

func TestTimeline(t *testing.T) {
	at := []time.Duration{900 * time.Millisecond, 900 * time.Millisecond, time.Second, time.Second}
	if got := Timeline([]bool{true, true, true, false}, at, time.Second); got != "##|#." {
		t.Errorf("Timeline = %q, want %q", got, "##|#.")
	}
}

// The burst scenario at 5/1s: what each algorithm holds after the ten
// requests at t=0, and later, from peeks that charge nothing.
func TestTraceBurst(t *testing.T) {
	l := sluice.PerSecond(5)
	s, _ := FindScenario("burst")
	at := s.Arrivals(l)
	samples := []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}
	for _, c := range []struct {
		id     string
		burst  []float64 // before the burst, then after each request
		later  []float64 // at the samples
		limit  float64
		inTime bool
	}{
		{"token_bucket", []float64{5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0}, []float64{2.5, 5, 5}, 5, false},
		{"leaky_bucket", []float64{0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5}, []float64{2.5, 0, 0}, 5, false},
		{"gcra", []float64{0, 200, 400, 600, 800, 1000, 1000, 1000, 1000, 1000, 1000}, []float64{500, 0, 0}, 1000, true},
		{"fixed_window", []float64{0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5}, []float64{5, 0, 0}, 5, false},
		{"sliding_log", []float64{0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5}, []float64{5, 0, 0}, 5, false},
		{"sliding_counter", []float64{0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5}, []float64{5, 2, 0}, 5, false},
		{"leaky_queue", []float64{0, 200, 400, 600, 800, 1000, 1000, 1000, 1000, 1000, 1000}, []float64{500, 0, 0}, 1000, true},
	} {
		a, ok := FindAlgorithm(c.id)
		if !ok {
			t.Fatalf("no algorithm %s", c.id)
		}
		r, err := Run(t.Context(), a, l, at)
		if err != nil {
			t.Fatalf("Run(%s): %v", c.id, err)
		}
		if got := values(r.State, 0); !slices.Equal(got, c.burst) {
			t.Errorf("Run(%s) state at t=0 %v, want %v", c.id, got, c.burst)
		}
		if len(r.State) != len(c.burst) {
			t.Errorf("Run(%s) has %d state points, want %d, all at t=0", c.id, len(r.State), len(c.burst))
		}
		// Trace keeps the burst's first, least, greatest and last, then
		// the samples.
		tr, err := Trace(t.Context(), a, l, at, samples)
		if err != nil {
			t.Fatalf("Trace(%s): %v", c.id, err)
		}
		if got := values(tr.State, 0); len(got) == 0 || got[0] != c.burst[0] || got[len(got)-1] != c.burst[len(c.burst)-1] || len(got) > 4 {
			t.Errorf("Trace(%s) state at t=0 %v, want at most 4 points from %v to %v", c.id, got, c.burst[0], c.burst[len(c.burst)-1])
		}
		for i, at := range samples {
			if got := values(tr.State, at); !slices.Equal(got, c.later[i:i+1]) {
				t.Errorf("Trace(%s) state at %v %v, want %v", c.id, at, got, c.later[i])
			}
		}
		if r.Gauge.Limit != c.limit || r.Gauge.Ms != c.inTime || r.Gauge.Label == "" || r.Gauge.Caption == "" {
			t.Errorf("Trace(%s) gauge %+v, want limit %v, in ms %v, a label and a caption", c.id, r.Gauge, c.limit, c.inTime)
		}
	}
}

// Trace's peeks charge nothing: its decisions are Run's, on a Poisson
// stream with samples between the arrivals.
func TestTraceDecidesAsRun(t *testing.T) {
	l := sluice.Limit{Rate: 5, Period: time.Second, Burst: 8}
	at, err := Poisson(9, 10*time.Second, 3, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var samples []time.Duration
	for s := time.Duration(0); s < 11*time.Second; s += 70 * time.Millisecond {
		samples = append(samples, s)
	}
	for _, a := range Algorithms {
		run, err := Run(t.Context(), a, l, at)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := Trace(t.Context(), a, l, at, samples)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(run.Allowed, tr.Allowed) || run.Retry != tr.Retry || !slices.Equal(run.Delays, tr.Delays) {
			t.Errorf("%s: Trace decided otherwise than Run", a.ID)
		}
		if n := len(tr.State); n < len(samples) || n > 4*(len(samples)+1) || !slices.IsSortedFunc(tr.State, func(x, y Point) int { return cmp.Compare(x.At, y.At) }) {
			t.Errorf("%s: %d state points, not in time order, or not one to four per sample", a.ID, n)
		}
		if n := len(run.State); n < len(at) {
			t.Errorf("%s: Run kept %d state points, want one at least per arrival (%d)", a.ID, n, len(at))
		}
		for _, p := range tr.State {
			if p.Value < 0 || p.Value > tr.Gauge.Limit {
				t.Errorf("%s: state %v at %v, outside [0, %v]", a.ID, p.Value, p.At, tr.Gauge.Limit)
				break
			}
		}
	}
}

// values are the values of the points at offset at.
func values(ps []Point, at time.Duration) []float64 {
	var out []float64
	for _, p := range ps {
		if p.At == at {
			out = append(out, p.Value)
		}
	}
	return out
}

// Thin keeps, per bin, the first, least, greatest and last points, each
// the first of its value, in their order.
func TestThin(t *testing.T) {
	ms := time.Millisecond
	ps := []Point{{0, 3}, {1 * ms, 1}, {2 * ms, 5}, {3 * ms, 1}, {4 * ms, 2}, {10 * ms, 7}, {11 * ms, 7}}
	got := Thin(ps, 10*ms)
	want := []Point{{0, 3}, {1 * ms, 1}, {2 * ms, 5}, {4 * ms, 2}, {10 * ms, 7}, {11 * ms, 7}}
	if !slices.Equal(got, want) {
		t.Errorf("Thin = %v, want %v", got, want)
	}
}
