package algo

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func TestLocate(t *testing.T) {
	for _, tt := range []struct {
		now, period, k, off int64
	}{
		{0, 10, 0, 0}, {9, 10, 0, 9}, {10, 10, 1, 0}, {-1, 10, -1, 9}, {-10, 10, -1, 0}, {-11, 10, -2, 9},
		{math.MaxInt64, 10, math.MaxInt64 / 10, 7}, {math.MinInt64, 10, math.MinInt64/10 - 1, 2},
		{math.MinInt64, math.MaxInt64, -2, math.MaxInt64 - 1}, {math.MaxInt64, math.MaxInt64, 1, 0},
		{math.MinInt64, 1, math.MinInt64, 0},
	} {
		w := NewWindow(1, time.Duration(tt.period))
		if k, off := w.locate(tt.now); k != tt.k || off != tt.off {
			t.Errorf("locate(%d) in windows of %d = %d, %d; want %d, %d", tt.now, tt.period, k, off, tt.k, tt.off)
		}
	}
}

// TestFirstFit checks the sliding counter's search for the first offset
// at which n units fit against a scan of every offset.
func TestFirstFit(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for range 3000 {
		rate := r.Int64N(12)
		period := 1 + r.Int64N(60)
		w := NewWindow(rate, time.Duration(period))
		prev, curr, n := r.Int64N(rate+1), r.Int64N(rate+1), r.Int64N(rate+1)
		want := period
		for off := range period {
			if w.fits(prev, curr, off, n) {
				want = off
				break
			}
		}
		if got := w.firstFit(prev, curr, n); got != want {
			t.Fatalf("%d per %d: firstFit(prev %d, curr %d, n %d) = %d, want %d", rate, period, prev, curr, n, got, want)
		}
	}
}

// TestCounterRemaining: ⌈rate - estimate⌉ or 0, against big.Rat.
func TestCounterRemaining(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for range 3000 {
		rate := r.Int64N(1 << 40)
		period := 1 + r.Int64N(1<<40)
		w := NewWindow(rate, time.Duration(period))
		prev, curr, off := r.Int64N(rate+1), r.Int64N(rate+1), r.Int64N(period)
		est := new(big.Rat).Add(new(big.Rat).Mul(big.NewRat(prev, 1), big.NewRat(period-off, period)), big.NewRat(curr, 1))
		left := new(big.Rat).Sub(big.NewRat(rate, 1), est)
		var want int64
		if left.Sign() > 0 {
			q, m := new(big.Int).DivMod(left.Num(), left.Denom(), new(big.Int))
			if m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			want = q.Int64()
		}
		if got := w.counterRemaining(prev, curr, off); got != want {
			t.Fatalf("%d per %d: counterRemaining(%d, %d, %d) = %d, want %d", rate, period, prev, curr, off, got, want)
		}
	}
}

// TestWindowIdle: a fixed window or counter state that its Idle reports
// idle can be dropped without changing any later decision.
func TestWindowIdle(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	fixedIdles, counterIdles := 0, 0
	for range 300 {
		rate := 1 + r.Int64N(10)
		period := 1 + r.Int64N(1000)
		w := NewWindow(rate, time.Duration(period))
		now := int64(1_700_000_000_000) + r.Int64N(period)
		var fs FixedState
		var cs CounterState
		for range 100 {
			now += r.Int64N(period)
			if w.FixedIdle(&fs, now) {
				fixedIdles++
				a, b := fs, FixedState{}
				for at, i := now, 0; i < 10; i, at = i+1, at+r.Int64N(period) {
					n := r.Int64N(rate + 1)
					if da, db := w.Fixed(&a, at, n), w.Fixed(&b, at, n); da != db {
						t.Fatalf("fixed %d/%d: idle %+v and a fresh state decide %+v and %+v", rate, period, fs, da, db)
					}
				}
			}
			if w.CounterIdle(&cs, now) {
				counterIdles++
				a, b := cs, CounterState{}
				for at, i := now, 0; i < 10; i, at = i+1, at+r.Int64N(period) {
					n := r.Int64N(rate + 1)
					if da, db := w.Counter(&a, at, n), w.Counter(&b, at, n); da != db {
						t.Fatalf("counter %d/%d: idle %+v and a fresh state decide %+v and %+v", rate, period, cs, da, db)
					}
				}
			}
			n := 1 + r.Int64N(rate)
			w.Fixed(&fs, now, n)
			w.Counter(&cs, now, n)
		}
	}
	if fixedIdles < 1000 || counterIdles < 1000 {
		t.Errorf("only %d fixed and %d counter idle states checked", fixedIdles, counterIdles)
	}
}
