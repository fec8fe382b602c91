package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// coarse are limits at the edges of the 2^62 ticks: primes per day, per
// week and per year, and huge bursts; all but 30011/day pass it at 1ns.
var coarse = []struct {
	rate   int64
	period time.Duration
	burst  int64
}{
	{99991, 24 * time.Hour, 99991},
	{30011, 24 * time.Hour, 30011},
	{7919, 7 * 24 * time.Hour, 7919},
	{1000003, 365 * 24 * time.Hour, 1000003},
	{3, time.Second, 1 << 40},
	{1, 24 * time.Hour, 1 << 45},
}

// TestCoarseRetryTight: at a coarse resolution, a denied request is
// allowed again exactly RetryAfter later and not a nanosecond sooner, a
// full refill takes exactly ResetAfter, and the units over a period never
// pass burst plus the rate's refill.
func TestCoarseRetryTight(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range coarse {
		x, err := NewTAT(c.rate, c.period, c.burst)
		if err != nil {
			t.Fatalf("NewTAT(%d, %v, %d) = %v", c.rate, c.period, c.burst, err)
		}
		now := int64(1_700_000_000_000_000_000) + r.Int64N(int64(time.Second))
		var s uint64
		for i := range 200 {
			n := 1 + r.Int64N(min(c.burst, 5))
			d, next := x.Step(s, now, n)
			if !d.Allowed {
				if d.RetryAfter <= 0 || d.RetryAfter == Never {
					t.Fatalf("%v: step %d: denied with RetryAfter %v", c, i, d.RetryAfter)
				}
				if e, _ := x.Step(s, now+int64(d.RetryAfter)-1, n); e.Allowed {
					t.Fatalf("%v: step %d: allowed 1ns before RetryAfter %v", c, i, d.RetryAfter)
				}
				if e, _ := x.Step(s, now+int64(d.RetryAfter), n); !e.Allowed {
					t.Fatalf("%v: step %d: denied at RetryAfter %v: %+v", c, i, d.RetryAfter, e)
				}
			}
			if d.ResetAfter > 0 {
				if x.Idle(next, now+int64(d.ResetAfter)-1) || !x.Idle(next, now+int64(d.ResetAfter)) {
					t.Fatalf("%v: step %d: not full exactly ResetAfter %v later", c, i, d.ResetAfter)
				}
			}
			s = next
			now += r.Int64N(int64(c.period) / c.rate * 3)
		}
	}
}

// TestCoarseRate: a coarse bucket emptied at once gives back Rate units
// over each Period, as the rate says: its resolution moves instants, never
// the rate.
func TestCoarseRate(t *testing.T) {
	for _, c := range coarse[:4] {
		x, err := NewTAT(c.rate, c.period, c.burst)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(1_700_000_000_123_456_789)
		d, s := x.Step(0, now, c.burst)
		if !d.Allowed {
			t.Fatalf("%v: a full bucket refused its burst: %+v", c, d)
		}
		at := now + int64(c.period)
		if d, _ := x.Step(s, at, c.rate); !d.Allowed {
			t.Errorf("%v: a period later, %d units refused: %+v", c, c.rate, d)
		}
		if d, _ := x.Step(s, at-int64(x.Resolution()), c.rate); d.Allowed {
			t.Errorf("%v: a quantum before a period, %d units allowed", c, c.rate)
		}
	}
}

// TestCoarseWide: the wide state decides as the bare one, with its origin
// moved forward often.
func TestCoarseWide(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range coarse {
		x, err := NewTAT(c.rate, c.period, c.burst)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(1_700_000_000_000_000_000) + r.Int64N(int64(time.Second))
		var s uint64
		var w Wide
		for i := range 500 {
			n := r.Int64N(min(c.burst, 5) + 1)
			want, next := x.Step(s, now, n)
			at := x.Enter(&w, now)
			got, wn := x.Step(w.X, at, n)
			w.X = wn
			if got != want {
				t.Fatalf("%v: step %d at %d: wide %+v, bare %+v", c, i, now, got, want)
			}
			s = next
			now += r.Int64N(int64(c.period) / c.rate * 2)
		}
	}
}

// TestTooLargeNamesNearest: a limit that fits at no resolution is refused
// with the limits nearest to it that fit, and each of those does.
func TestTooLargeNamesNearest(t *testing.T) {
	for _, c := range []struct {
		rate   int64
		period time.Duration
		burst  int64
		want   []string
	}{
		{math.MaxInt64 / 2, 365 * 24 * time.Hour, 0, []string{"4611686018403168000/8760h0m0s"}},
		{365 << 52, 365 * 24 * time.Hour, 0, []string{"4503599627370496/24h0m0s"}},
		{1, time.Second, 1<<62 + 1, []string{"1/1s burst 4611686018427387904"}},
		{1, math.MaxInt64, 0, nil},
	} {
		burst := c.burst
		if burst == 0 {
			burst = c.rate
		}
		_, err := NewTAT(c.rate, c.period, burst)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("NewTAT(%d, %v, %d) = %v, want ErrTooLarge", c.rate, c.period, burst, err)
		}
		if c.want == nil && strings.Contains(err.Error(), "nearest") {
			t.Errorf("NewTAT(%d, %v, %d) = %q, want no limit named", c.rate, c.period, burst, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("NewTAT(%d, %v, %d) = %q, want it to name %q", c.rate, c.period, burst, err, w)
			}
		}
		t.Log(err)
	}
}
