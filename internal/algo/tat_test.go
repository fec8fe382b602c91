package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestNewTAT(t *testing.T) {
	for _, tt := range []struct {
		rate   int64
		period time.Duration
		burst  int64
		p, q   uint64
		res    time.Duration
		err    bool
	}{
		{5, time.Second, 5, 200_000_000, 1, 1, false},
		{3, time.Second, 3, 1_000_000_000, 3, 1, false},
		{7, time.Minute, 7, 60_000_000_000, 7, 1, false},
		{1_000_000_000_000, time.Second, 1_000_000_000_000, 1, 1000, 1, false},
		{0, time.Second, 2, 1, 0, 1, false},
		{1, time.Second, 4611686018, 1_000_000_000, 1, 1, false},
		// Past 2^62 ticks at 1ns, a bucket decides at 1µs, 1ms or 1s.
		{1, time.Second, 4611686019, 1_000_000, 1, time.Microsecond, false},
		{99991, 24 * time.Hour, 99991, 86_400_000_000, 99991, time.Microsecond, false},
		{7, 7 * 24 * time.Hour, 7, 86_400_000_000_000, 1, 1, false},
		{7919, 7 * 24 * time.Hour, 7919, 604_800_000_000, 7919, time.Microsecond, false},
		{1000003, 365 * 24 * time.Hour, 1000003, 31_536_000_000, 1000003, time.Millisecond, false},
		{1, 1<<62 + 1, 1, 922337203685477581, 200, time.Microsecond, false}, // 5 divides the period
		{1, time.Second, 1<<62 + 1, 0, 0, 0, true},
		{1, math.MaxInt64, 1, 0, 0, 0, true}, // no quantum shares a factor with the period
	} {
		x, err := NewTAT(tt.rate, tt.period, tt.burst)
		if tt.err {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("NewTAT(%d, %v, %d) = %v, want ErrTooLarge", tt.rate, tt.period, tt.burst, err)
			}
			continue
		}
		if err != nil || x.p != tt.p || x.q != tt.q || x.Burst() != tt.burst || x.Resolution() != tt.res {
			t.Errorf("NewTAT(%d, %v, %d) = p %d q %d burst %d res %v, %v; want p %d q %d res %v", tt.rate, tt.period, tt.burst, x.p, x.q, x.Burst(), x.Resolution(), err, tt.p, tt.q, tt.res)
		}
	}
}

// TestTATIdle: a state that Idle reports idle can be dropped (replaced by
// the zero state) without changing any later decision. This is what lets
// a store forget idle keys.
func TestTATIdle(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	total := 0
	for range 300 {
		rate := 1 + r.Int64N(20)
		period := time.Duration(1 + r.Int64N(int64(10*time.Second)))
		burst := 1 + r.Int64N(2*rate)
		x, err := NewTAT(rate, period, burst)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(1_700_000_000_000_000_000) + r.Int64N(int64(period))
		var state uint64
		idles := 0
		for range 100 {
			now += r.Int64N(int64(period) / rate * 2)
			if x.Idle(state, now) {
				idles++
				// The same future from the state and from nothing.
				a, b, at := state, uint64(0), now
				for range 10 {
					n := r.Int64N(burst + 1)
					da, na := x.Step(a, at, n)
					db, nb := x.Step(b, at, n)
					if da != db {
						t.Fatalf("%d/%v burst %d: idle state %d and a fresh one decide %+v and %+v", rate, period, burst, state, da, db)
					}
					a, b, at = na, nb, at+r.Int64N(int64(period)/rate)
				}
			}
			_, state = x.Step(state, now, 1+r.Int64N(burst))
		}
		total += idles
	}
	if total < 1000 {
		t.Errorf("only %d idle states checked", total)
	}
}

// TestTATRefund: a reservation refunded before anything else came leaves
// the state as if it had never been made.
func TestTATRefund(t *testing.T) {
	x, _ := NewTAT(5, time.Second, 3)
	now := int64(1_700_000_000_000_000_000)
	_, s1 := x.Step(0, now, 1)
	_, wait, s2 := x.Release(s1, now, 2)
	if wait != 200*time.Millisecond {
		t.Errorf("Release behind 1 unit waits %v, want 200ms", wait)
	}
	if back, ok := x.Refund(s2, s2, 2); !ok || back != s1 {
		t.Errorf("Refund = %d, %v; want %d, true", back, ok, s1)
	}
	if back, ok := x.Refund(s2, s1, 2); ok || back != s2 {
		t.Errorf("Refund after a later charge = %d, %v; want %d, false", back, ok, s2)
	}
	if _, ok := x.Refund(s2, s2, 0); ok {
		t.Error("Refund of 0 units: ok, want false")
	}
}

// TestTATNeverZero: the zero state means "never used"; a used state is
// never stored as zero, even when its TAT lands on the mark.
func TestTATNeverZero(t *testing.T) {
	x, _ := NewTAT(1, time.Second, 1)
	// A TAT of exactly origin: now + debt = 2^63 ns, at the very end of
	// int64 time with one tick per ns.
	now := int64(1<<63 - 1 - 999_999_999)
	d, s := x.Step(0, now, 1)
	if !d.Allowed || s == 0 {
		t.Fatalf("Step(0, %d, 1) = %+v, %d; want allowed and a non-zero state", now, d, s)
	}
	if d, _ := x.Step(s, now, 1); d.Allowed {
		t.Errorf("the bucket read as never used after it was emptied: %+v", d)
	}
}
