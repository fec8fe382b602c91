package sim

import (
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
