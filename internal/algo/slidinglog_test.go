package algo

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestLogRingNeverOverwrites: the ring has a cell per unit of rate, and a
// live entry holds at least one unit, so it never overwrites a live entry:
// the ring's units always add up to Count.
func TestLogRingNeverOverwrites(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for range 200 {
		rate := 1 + r.Int64N(20)
		period := 1 + r.Int64N(1000)
		l, err := NewLog(rate, time.Duration(period))
		if err != nil {
			t.Fatal(err)
		}
		s := l.NewState()
		now := int64(1_700_000_000_000)
		for range 200 {
			now += r.Int64N(period / 2)
			l.Step(&s, now, r.Int64N(rate+2))
			var sum int64
			for e := range s.Ring.All() {
				sum += e.N
				if e.N <= 0 || now-e.At >= period {
					t.Fatalf("%d/%d: entry %+v in the ring at %d", rate, period, e, now)
				}
			}
			if sum != s.Count || sum > rate {
				t.Fatalf("%d/%d: ring holds %d units, Count %d, rate %d", rate, period, sum, s.Count, rate)
			}
		}
	}
}

// TestLogIdle: a log that Idle reports idle can be dropped without
// changing any later decision.
func TestLogIdle(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	idles := 0
	for range 200 {
		rate := 1 + r.Int64N(10)
		period := 1 + r.Int64N(1000)
		l, _ := NewLog(rate, time.Duration(period))
		s := l.NewState()
		now := int64(1_700_000_000_000)
		for range 100 {
			now += r.Int64N(period)
			if l.Idle(&s, now) {
				idles++
				a, b := copyLog(&l, &s), l.NewState()
				for at, i := now, 0; i < 10; i, at = i+1, at+r.Int64N(period) {
					n := r.Int64N(rate + 1)
					if da, db := l.Step(&a, at, n), l.Step(&b, at, n); da != db {
						t.Fatalf("%d/%d: at %d the idle log decides %+v, a fresh one %+v", rate, period, at, da, db)
					}
				}
			}
			l.Step(&s, now, 1+r.Int64N(rate))
		}
	}
	if idles < 1000 {
		t.Errorf("only %d idle states checked", idles)
	}
}

// copyLog is a deep copy of s, ring and all.
func copyLog(l *Log, s *LogState) LogState {
	c := l.NewState()
	for e := range s.Ring.All() {
		c.Ring.Push(e)
	}
	c.Count, c.Last, c.Used = s.Count, s.Last, s.Used
	return c
}

// TestLogFarApart: entries older than 2^63 ns leave the window: the age is
// computed without overflowing an int64.
func TestLogFarApart(t *testing.T) {
	l, _ := NewLog(1, time.Second)
	s := l.NewState()
	if d := l.Step(&s, math.MinInt64+1000, 1); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	now := int64(math.MaxInt64 - 1000)
	if !l.Idle(&s, now) {
		t.Error("Idle 2^64-2000 ns later = false, want true")
	}
	if d := l.Step(&s, now, 1); !d.Allowed || d.ResetAfter != time.Second {
		t.Errorf("request 2^64-2000 ns later = %+v, want allowed with ResetAfter 1s", d)
	}
}

func TestNewLogTooLarge(t *testing.T) {
	if _, err := NewLog(MaxLogRate, time.Second); err != nil {
		t.Errorf("NewLog(MaxLogRate): %v", err)
	}
	if _, err := NewLog(MaxLogRate+1, time.Second); err == nil {
		t.Error("NewLog(MaxLogRate+1) = nil error, want ErrTooLarge")
	}
}
