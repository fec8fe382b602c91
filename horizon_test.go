package sluice

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A limit whose emission interval has a large denominator (12347 per
// second: ticks of 1/12347 ns) has a tick horizon of days. A bucket left
// idle for longer must still read as full, not as a wrapped debt.
func TestBucketIdlePastHorizon(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, l := range []Limit{PerSecond(12347), {Rate: 49999, Period: 24 * time.Hour}, {Rate: 1e12 - 1, Period: time.Second, Burst: 1000}} {
		for name, newAlg := range map[string]func(Limit) (Algorithm, error){
			"token": func(l Limit) (Algorithm, error) { return NewTokenBucket(l) },
			"gcra":  func(l Limit) (Algorithm, error) { return NewGCRA(l) },
		} {
			a, err := newAlg(l)
			if err != nil {
				t.Fatalf("%s %v: %v", name, l, err)
			}
			if d := a.AllowN(t0, l.Capacity()); !d.Allowed {
				t.Fatalf("%s %v: AllowN(t0, B) = %+v, want allowed", name, l, d)
			}
			for _, idle := range []time.Duration{9 * 24 * time.Hour, 400 * 24 * time.Hour, 30 * 365 * 24 * time.Hour} {
				t0 = t0.Add(idle)
				want := Decision{Allowed: true, Limit: l.Capacity(), Remaining: 0}
				d := a.AllowN(t0, l.Capacity())
				d.ResetAfter = 0
				if d != want {
					t.Errorf("%s %v: AllowN(t0+%v, B) = %+v, want %+v", name, l, idle, d, want)
				}
			}
		}
	}
}

// With the wide state the last time seen is kept, so a clock that goes back
// is read as the last time seen, exactly.
func TestBucketWideClockBack(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := PerSecond(12347)
	a, _ := NewTokenBucket(l)
	b, _ := NewTokenBucket(l)
	a.AllowN(t0, 5000)
	b.AllowN(t0, 5000)
	later := t0.Add(200 * time.Millisecond)
	a.AllowN(later, 0)
	b.AllowN(later, 0)
	if got, want := a.AllowN(t0, 3000), b.AllowN(later, 3000); got != want {
		t.Errorf("AllowN(t0, 3000) after seeing t0+200ms = %+v, want as at t0+200ms %+v", got, want)
	}
}

func TestPeekIsAllowedEvenWhenEmpty(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, a := range []Algo{AlgoTokenBucket, AlgoGCRA, AlgoLeakyBucket} {
		lim, _ := a.New(PerSecond(5))
		lim.AllowN(t0.Add(10*time.Second), 5)
		if d := lim.AllowN(t0.Add(9*time.Second), 0); !d.Allowed || d.RetryAfter != 0 {
			t.Errorf("%s: peek after a clock jump back = %+v, want allowed", a, d)
		}
	}
}

func TestLeakyQueueWaitCosts(t *testing.T) {
	q, _ := NewLeakyQueue(PerSecond(1))
	if err := q.Wait(context.Background(), -1); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("Wait(-1) = %v, want ErrInvalidCost", err)
	}
	if err := q.Wait(context.Background(), 0); err != nil {
		t.Errorf("Wait(0) = %v, want nil", err)
	}
	if err := q.Wait(context.Background(), 2); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Wait(2) on a queue of 1 = %v, want ErrQueueFull", err)
	}
}
