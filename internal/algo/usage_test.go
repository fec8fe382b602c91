package algo

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// usageT0 is where the usage tables start: a whole second, so that windows
// of a second start there.
const usageT0 = int64(1_700_000_000_000_000_000)

// usageStep is one row of a usage table: a check of cost n at usageT0+at,
// charged by c, and the decision it must get.
type usageStep struct {
	at   time.Duration
	n    int64
	c    Charge
	want Decision
}

const ms = time.Millisecond

func allowed(limit, remaining int64, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func denied(limit, remaining int64, retry, reset time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// runUsage runs steps on one state through step, which decides with the
// arithmetic charged by the step's charge.
func runUsage(t *testing.T, steps []usageStep, step func(now, n int64, c Charge) Decision) {
	t.Helper()
	for i, s := range steps {
		if got := step(usageT0+int64(s.at), s.n, s.c); got != s.want {
			t.Fatalf("step %d: charge %d, check of %d at t0+%v = %+v, want %+v", i, s.c, s.n, s.at, got, s.want)
		}
	}
}

// TestTATUsage: 10 per second, burst 10: a unit is 100ms of refill.
func TestTATUsage(t *testing.T) {
	base, err := NewTAT(10, time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	steps := []usageStep{
		{0, 4, ChargeUsage, allowed(10, 6, 400*ms)},
		// Past what is left and past the capacity: recorded all the same,
		// up to the cap of twice the burst, and never allowed.
		{0, 15, ChargeUsage, denied(10, 0, Never, 1900*ms)},
		// Cost 0: a usage rule needs one unit, a count rule no debt.
		{0, 0, ChargeUsage, denied(10, 0, 1000*ms, 1900*ms)},
		{0, 0, ChargeCount, denied(10, 0, 900*ms, 1900*ms)},
		{0, 0, ChargeGate, allowed(10, 0, 1900*ms)},
		{900 * ms, 0, ChargeCount, allowed(10, 0, 1000*ms)},
		{900*ms + 1, 0, ChargeUsage, denied(10, 0, 100*ms-1, 1000*ms-1)},
		{1000 * ms, 0, ChargeUsage, allowed(10, 1, 900*ms)},
		// A gate check over what is left records nothing; a usage one
		// records, and waits for the debt to drain to where it fits.
		{1000 * ms, 5, ChargeGate, denied(10, 1, 400*ms, 900*ms)},
		{1000 * ms, 5, ChargeUsage, denied(10, 0, 900*ms, 1400*ms)},
		{1000 * ms, 3, ChargeCount, denied(10, 0, 1000*ms, 1700*ms)},
		// The cap: two bursts of debt, however much is charged.
		{1000 * ms, math.MaxInt64, ChargeUsage, denied(10, 0, Never, 2000*ms)},
		{1000 * ms, math.MaxInt64, ChargeCount, denied(10, 0, Never, 2000*ms)},
		{1000 * ms, 1, ChargeUsage, denied(10, 0, 1100*ms, 2000*ms)},
		// Negative: refused, nothing recorded.
		{1000 * ms, -1, ChargeUsage, denied(10, 0, Never, 2000*ms)},
		// Left alone two periods, it is full.
		{3000 * ms, 10, ChargeUsage, allowed(10, 0, 1000*ms)},
		{4000 * ms, 0, ChargeUsage, allowed(10, 10, 0)},
	}
	var x uint64
	runUsage(t, steps, func(now, n int64, c Charge) Decision {
		tt := base.Charged(c)
		d, next := tt.Step(x, now, n)
		x = next
		return d
	})
	// The lock-free form makes the same decisions.
	var ax atomic.Uint64
	runUsage(t, steps, func(now, n int64, c Charge) Decision {
		tt := base.Charged(c)
		ok, rem, retry, reset := tt.Allow(&ax, now, n)
		return Decision{Allowed: ok, Limit: tt.Burst(), Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	})
}

// TestTATUsageRateZero: with no refill, debt could never drain: a usage
// rule of Rate 0 records only what fits, and its cost-0 check waits for
// nothing that will come.
func TestTATUsageRateZero(t *testing.T) {
	base, _ := NewTAT(0, time.Second, 2)
	var x uint64
	runUsage(t, []usageStep{
		{0, 1, ChargeUsage, allowed(2, 1, Never)},
		{0, 5, ChargeUsage, denied(2, 1, Never, Never)},
		{0, 2, ChargeUsage, denied(2, 1, Never, Never)},
		{0, 0, ChargeUsage, allowed(2, 1, Never)},
		{0, 1, ChargeCount, allowed(2, 0, Never)},
		{0, 0, ChargeUsage, denied(2, 0, Never, Never)},
		{0, 0, ChargeCount, allowed(2, 0, Never)},
		{0, 1, ChargeCount, denied(2, 0, Never, Never)},
		{0, 0, ChargeCount, allowed(2, 0, Never)},
	}, func(now, n int64, c Charge) Decision {
		tt := base.Charged(c)
		d, next := tt.Step(x, now, n)
		x = next
		return d
	})
	empty, _ := NewTAT(0, time.Second, 0)
	var y uint64
	runUsage(t, []usageStep{
		{0, 1, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeCount, allowed(0, 0, 0)},
	}, func(now, n int64, c Charge) Decision {
		tt := empty.Charged(c)
		d, next := tt.Step(y, now, n)
		y = next
		return d
	})
}

// TestTATUsageHuge: costs near MaxInt64 on a bucket of 10^12 per second
// saturate at the cap, never wrap.
func TestTATUsageHuge(t *testing.T) {
	base, err := NewTAT(1_000_000_000_000, time.Second, 1_000_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	u := base.Charged(ChargeUsage)
	var x uint64
	for _, n := range []int64{math.MaxInt64, math.MaxInt64 - 1, 1 << 62, 3_000_000_000_000} {
		d, next := u.Step(x, usageT0, n)
		x = next
		if want := denied(1_000_000_000_000, 0, Never, 2*time.Second); d != want {
			t.Fatalf("Step(t0, %d) = %+v, want %+v", n, d, want)
		}
	}
	if d, _ := u.Step(x, usageT0+int64(time.Second), 0); d.Allowed || d.RetryAfter != 1 {
		t.Errorf("cost 0 a second later = %+v, want denied, RetryAfter 1ns", d)
	}
	if d, _ := u.Step(x, usageT0+int64(2*time.Second), 1_000_000_000_000); !d.Allowed {
		t.Errorf("the whole burst two seconds later = %+v, want allowed", d)
	}
}

// TestWideUsage: a bucket of short horizon, kept as a Wide, keeps a
// usage debt of two bursts past one refill, and forgets it after two.
func TestWideUsage(t *testing.T) {
	base, err := NewTAT(12347, time.Second, 12347)
	if err != nil || !base.NeedsWide() {
		t.Fatalf("NewTAT(12347/s) = %v, NeedsWide %v; want a wide bucket", err, base.NeedsWide())
	}
	u := base.Charged(ChargeUsage)
	var s Wide
	step := func(now, n int64) Decision {
		rel := u.Enter(&s, now) // before reading s.X, which it may move
		d, next := u.Step(s.X, rel, n)
		s.X = next
		return d
	}
	if d := step(usageT0, 3*12347); d.Allowed || d.ResetAfter != 2*time.Second {
		t.Fatalf("3 bursts at t0 = %+v, want denied with ResetAfter 2s", d)
	}
	if u.WideIdle(&s, usageT0+int64(time.Second)) {
		t.Error("WideIdle a refill later = true, want false: a burst of debt is left")
	}
	if d := step(usageT0+int64(time.Second), 0); d.Allowed || d.Remaining != 0 {
		t.Errorf("cost 0 a refill later = %+v, want denied", d)
	}
	if !u.WideIdle(&s, usageT0+int64(3*time.Second)) {
		t.Error("WideIdle two refills after the last use = false, want true")
	}
	if d := step(usageT0+int64(3*time.Second), 12347); !d.Allowed {
		t.Errorf("a burst two refills later = %+v, want allowed", d)
	}
}

// TestFixedUsage: 5 per second, windows on whole seconds.
func TestFixedUsage(t *testing.T) {
	w := NewWindow(5, time.Second)
	var s FixedState
	runUsage(t, []usageStep{
		{100 * ms, 3, ChargeUsage, allowed(5, 2, 900*ms)},
		{100 * ms, 4, ChargeUsage, denied(5, 0, 900*ms, 900*ms)},
		{100 * ms, 0, ChargeUsage, denied(5, 0, 900*ms, 900*ms)},
		{100 * ms, 0, ChargeCount, denied(5, 0, 900*ms, 900*ms)},
		{100 * ms, 0, ChargeGate, allowed(5, 0, 900*ms)},
		{100 * ms, 9, ChargeGate, denied(5, 0, Never, 900*ms)},
		{100 * ms, math.MaxInt64, ChargeCount, denied(5, 0, Never, 900*ms)},
		{999 * ms, -3, ChargeUsage, denied(5, 0, Never, 1*ms)},
		// The window's end clears the debt, whatever it was.
		{1000 * ms, 5, ChargeCount, allowed(5, 0, 1000*ms)},
		{1000 * ms, 0, ChargeCount, allowed(5, 0, 1000*ms)},
		{1000 * ms, 0, ChargeUsage, denied(5, 0, 1000*ms, 1000*ms)},
		{1500 * ms, 1, ChargeCount, denied(5, 0, 500*ms, 500*ms)},
		{1500 * ms, 0, ChargeCount, denied(5, 0, 500*ms, 500*ms)},
		{2000 * ms, 0, ChargeCount, allowed(5, 5, 0)},
	}, func(now, n int64, c Charge) Decision {
		ww := w.Charged(c)
		return ww.Fixed(&s, now, n)
	})
	// The cap, seen through the count: 5 more units of usage fill the
	// window to 10, and no more.
	var cs FixedState
	u := w.Charged(ChargeUsage)
	for _, n := range []int64{4, 4, 4, math.MaxInt64} {
		u.Fixed(&cs, usageT0, n)
	}
	if cs.Count != 10 {
		t.Errorf("count after 12 units and MaxInt64 = %d, want the cap, 10", cs.Count)
	}
	// Rate 0 records nothing; a count rule's cost 0 is not over.
	z := NewWindow(0, time.Second)
	var zs FixedState
	runUsage(t, []usageStep{
		{0, 1, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeCount, allowed(0, 0, 0)},
	}, func(now, n int64, c Charge) Decision {
		zz := z.Charged(c)
		return zz.Fixed(&zs, now, n)
	})
	// A rate near MaxInt64 saturates its cap.
	big := NewWindow(math.MaxInt64-1, time.Second).Charged(ChargeUsage)
	var bs FixedState
	big.Fixed(&bs, usageT0, math.MaxInt64-1)
	if d := big.Fixed(&bs, usageT0, math.MaxInt64); d.Allowed || d.Remaining != 0 || bs.Count != math.MaxInt64 {
		t.Errorf("MaxInt64 more on a full window of MaxInt64-1 = %+v, count %d; want denied, count MaxInt64", d, bs.Count)
	}
}

// TestCounterUsage: 4 per second.
func TestCounterUsage(t *testing.T) {
	w := NewWindow(4, time.Second)
	var s CounterState
	runUsage(t, []usageStep{
		{0, 3, ChargeUsage, allowed(4, 1, 2000*ms)},
		// 3+3-1 >= 4: denied, recorded: curr 6. It fits again once the
		// previous window's weight is under 2: 6·(1-off) < 2.
		{0, 3, ChargeUsage, denied(4, 0, 1000*ms+666666667, 2000*ms)},
		// One unit: 6·(1-off) < 4; no debt: 6·(1-off) - 1 < 4.
		{0, 0, ChargeUsage, denied(4, 0, 1000*ms+333333334, 2000*ms)},
		{0, 0, ChargeCount, denied(4, 0, 1000*ms+166666667, 2000*ms)},
		{0, 0, ChargeGate, allowed(4, 0, 2000*ms)},
		{0, 5, ChargeGate, denied(4, 0, Never, 2000*ms)},
		// The cap: curr never above 8.
		{0, math.MaxInt64, ChargeUsage, denied(4, 0, Never, 2000*ms)},
		{0, 1, ChargeCount, denied(4, 0, 1000*ms+500*ms+1, 2000*ms)},
		{1750 * ms, 0, ChargeCount, allowed(4, 2, 250*ms)},
		{1750 * ms, 1, ChargeUsage, allowed(4, 1, 1250*ms)},
		{3000 * ms, 4, ChargeUsage, allowed(4, 0, 2000*ms)},
	}, func(now, n int64, c Charge) Decision {
		ww := w.Charged(c)
		return ww.Counter(&s, now, n)
	})
	var cs CounterState
	u := w.Charged(ChargeUsage)
	for _, n := range []int64{4, 4, 4, math.MaxInt64} {
		u.Counter(&cs, usageT0, n)
	}
	if cs.Curr != 8 {
		t.Errorf("curr after 12 units and MaxInt64 = %d, want the cap, 8", cs.Curr)
	}
	// A count rule's cost 0 on a counter of rate MaxInt64: room of 2^63.
	big := NewWindow(math.MaxInt64, time.Second).Charged(ChargeCount)
	var bs CounterState
	if d := big.Counter(&bs, usageT0, 0); !d.Allowed {
		t.Errorf("cost 0 on an empty counter of MaxInt64 = %+v, want allowed", d)
	}
	z := NewWindow(0, time.Second)
	var zs CounterState
	runUsage(t, []usageStep{
		{0, 1, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeCount, allowed(0, 0, 0)},
	}, func(now, n int64, c Charge) Decision {
		zz := z.Charged(c)
		return zz.Counter(&zs, now, n)
	})
}

// TestLogUsage: 3 per second, a ring of 3 cells.
func TestLogUsage(t *testing.T) {
	l, _ := NewLog(3, time.Second)
	s := l.NewState()
	runUsage(t, []usageStep{
		{0, 2, ChargeUsage, allowed(3, 1, 1000*ms)},
		// Recorded: 4 live units. 2 more fit once both entries left.
		{100 * ms, 2, ChargeUsage, denied(3, 0, 1000*ms, 1000*ms)},
		{200 * ms, 1, ChargeUsage, denied(3, 0, 900*ms, 1000*ms)},
		// The ring is full: the unit joins the newest entry, moved to now.
		{300 * ms, 1, ChargeCount, denied(3, 0, 800*ms, 1000*ms)},
		// The cap: 6 live units.
		{300 * ms, math.MaxInt64, ChargeUsage, denied(3, 0, Never, 1000*ms)},
		{300 * ms, 0, ChargeGate, allowed(3, 0, 1000*ms)},
		{300 * ms, 2, ChargeGate, denied(3, 0, 1000*ms, 1000*ms)},
		// At t0+1s the first entry has left: 4 live units.
		{1000 * ms, 0, ChargeUsage, denied(3, 0, 100*ms, 300*ms)},
		{1000 * ms, 0, ChargeCount, denied(3, 0, 100*ms, 300*ms)},
		{1100 * ms, 0, ChargeUsage, allowed(3, 1, 200*ms)},
		{1100 * ms, 0, ChargeCount, allowed(3, 1, 200*ms)},
		{1300 * ms, 3, ChargeCount, allowed(3, 0, 1000*ms)},
		{1300 * ms, 0, ChargeCount, allowed(3, 0, 1000*ms)},
	}, func(now, n int64, c Charge) Decision {
		ll := l.Charged(c)
		return ll.Step(&s, now, n)
	})
	z, _ := NewLog(0, time.Second)
	zs := z.NewState()
	runUsage(t, []usageStep{
		{0, 1, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeUsage, denied(0, 0, Never, 0)},
		{0, 0, ChargeCount, allowed(0, 0, 0)},
	}, func(now, n int64, c Charge) Decision {
		zz := z.Charged(c)
		return zz.Step(&zs, now, n)
	})
}

// TestLogUsageRing: under usage charges of any size the ring's units add
// up to Count, at most twice the rate, and every entry is live.
func TestLogUsageRing(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	for range 200 {
		rate := 1 + r.Int64N(20)
		period := 1 + r.Int64N(1000)
		l, _ := NewLog(rate, time.Duration(period))
		l = l.Charged(Charge(1 + r.IntN(2)))
		s := l.NewState()
		now := int64(1_700_000_000_000)
		for range 200 {
			now += r.Int64N(period / 4)
			n := r.Int64N(3*rate + 2)
			if r.IntN(20) == 0 {
				n = math.MaxInt64
			}
			l.Step(&s, now, n)
			var sum int64
			for e := range s.Ring.All() {
				sum += e.N
				if e.N <= 0 || now-e.At >= period {
					t.Fatalf("%d/%d: entry %+v in the ring at %d", rate, period, e, now)
				}
			}
			if sum != s.Count || sum > 2*rate {
				t.Fatalf("%d/%d: ring holds %d units, Count %d, rate %d", rate, period, sum, s.Count, rate)
			}
		}
	}
}

// TestTATUsageLag: the one-word state cannot tell a time gone back from
// debt, so a usage charge stamped lag earlier than the latest time seen
// caps its debt as of its own time. It is decided no more permissively
// than at the latest time, and leaves at most lag's refill (lag·q ticks)
// less debt than a charge at the latest time would.
func TestTATUsageLag(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	capped := 0
	for range 2000 {
		rate := 1 + r.Int64N(20)
		period := time.Duration(1 + r.Int64N(int64(10*time.Second)))
		burst := 1 + r.Int64N(2*rate)
		base, err := NewTAT(rate, period, burst)
		if err != nil {
			t.Fatal(err)
		}
		x := base.Charged(Charge(1 + r.IntN(2)))
		seen := usageT0 + r.Int64N(int64(period))
		var s uint64
		for range 1 + r.IntN(6) {
			_, s = x.Step(s, seen, r.Int64N(3*burst+1))
			seen += r.Int64N(int64(period) / rate)
		}
		_, s = x.Step(s, seen, 0)
		lag := r.Int64N(2 * int64(period))
		n := r.Int64N(3*burst + 1)
		dl, sl := x.Step(s, seen-lag, n)
		ds, ss := x.Step(s, seen, n)
		if dl.Allowed && !ds.Allowed || dl.Remaining > ds.Remaining {
			t.Fatalf("%d/%v burst %d: Step(t-%d, %d) = %+v, more permissive than at t: %+v", rate, period, burst, lag, n, dl, ds)
		}
		// Both states read at seen: the lagged one's debt is at most
		// lag·q ticks less.
		debtL, debtS := x.debt(sl, uint64(seen)*x.q), x.debt(ss, uint64(seen)*x.q)
		if debtL+uint64(lag)*x.q < debtS {
			t.Fatalf("%d/%v burst %d: Step(t-%d, %d) left debt %d at t, Step(t, %d) %d: more than lag·q = %d less", rate, period, burst, lag, n, debtL, n, debtS, uint64(lag)*x.q)
		}
		if debtL < debtS {
			capped++
		}
	}
	if capped < 50 {
		t.Errorf("only %d charges met the cap with a lag", capped)
	}
}
