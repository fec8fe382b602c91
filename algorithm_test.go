package sluice

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// t0 is the start of every step table: a whole hour, so that windows of a
// second, a minute or an hour start at t0.
var t0 = time.Date(2025, time.March, 3, 12, 0, 0, 0, time.UTC)

// kind groups the algorithms by the reference model they must agree with.
type kind int

const (
	bucketKind kind = iota // TokenBucket, LeakyBucket, GCRA
	fixedKind
	logKind
	counterKind
)

type algorithm struct {
	name string
	kind kind
	new  func(Limit) (Algorithm, error)
	// charge is how the limiter is charged: the single-key types are
	// gate limiters, and the property tests set their arithmetic's charge
	// (see charged) to hold the usage arithmetic to the same properties.
	charge Charge
}

// ctor adapts a constructor to return the interface, and a nil interface
// (not a typed nil) on error.
func ctor[T Algorithm](f func(Limit) (T, error)) func(Limit) (Algorithm, error) {
	return func(l Limit) (Algorithm, error) {
		x, err := f(l)
		if err != nil {
			return nil, err
		}
		return x, nil
	}
}

var algorithms = []algorithm{
	{"TokenBucket", bucketKind, ctor(NewTokenBucket), ChargeGate},
	{"LeakyBucket", bucketKind, ctor(NewLeakyBucket), ChargeGate},
	{"GCRA", bucketKind, ctor(NewGCRA), ChargeGate},
	{"FixedWindow", fixedKind, ctor(NewFixedWindow), ChargeGate},
	{"SlidingLog", logKind, ctor(NewSlidingLog), ChargeGate},
	{"SlidingCounter", counterKind, ctor(NewSlidingCounter), ChargeGate},
}

// chargedAlgorithms are the algorithms under each charge: gate, usage and
// count.
var chargedAlgorithms = func() []algorithm {
	var as []algorithm
	for _, c := range []Charge{ChargeGate, ChargeUsage, ChargeCount} {
		for _, a := range algorithms {
			a.charge = c
			if c != ChargeGate {
				a.name += "/" + c.String()
			}
			as = append(as, a)
		}
	}
	return as
}()

// charged sets the charge of x's arithmetic to c. The single-key types
// have no charge of their own; Rule.Charge gives a rule's keys one in a
// store, with the same arithmetic.
func charged(x Algorithm, c Charge) Algorithm {
	ac := algo.Charge(c)
	switch v := x.(type) {
	case *TokenBucket:
		v.t = v.t.Charged(ac)
	case *LeakyBucket:
		v.t = v.t.Charged(ac)
	case *GCRA:
		v.t = v.t.Charged(ac)
	case *FixedWindow:
		v.w = v.w.Charged(ac)
	case *SlidingCounter:
		v.w = v.w.Charged(ac)
	case *SlidingLog:
		v.l = v.l.Charged(ac)
	}
	return x
}

func algorithmsOf(k kind) []algorithm {
	var as []algorithm
	for _, a := range algorithms {
		if a.kind == k {
			as = append(as, a)
		}
	}
	return as
}

// capacity is the most units one request may ask for: Burst (or Rate) for
// the buckets, Rate for the windows.
func (a algorithm) capacity(l Limit) int64 {
	if a.kind == bucketKind {
		return l.Capacity()
	}
	return l.Rate
}

func mustNew(t testing.TB, a algorithm, l Limit) Algorithm {
	t.Helper()
	x, err := a.new(l)
	if err != nil {
		t.Fatalf("New%s(%v): %v", a.name, l, err)
	}
	return charged(x, a.charge)
}

// step is one line of a step table: a request of cost n at t0+at and the
// decision it must get.
type step struct {
	at   time.Duration
	n    int64
	want Decision
}

func allow(limit, remaining int64, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func deny(limit, remaining int64, retry, reset time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// repeat is n copies of s.
func repeat(n int, s step) []step {
	ss := make([]step, n)
	for i := range ss {
		ss[i] = s
	}
	return ss
}

type stepTable struct {
	name  string
	limit Limit
	steps []step
}

// runTables runs every table against a fresh limiter of each algorithm.
// The tables are checked against the reference models too, up to the first
// step back in time, which the models do not define.
func runTables(t *testing.T, as []algorithm, tables []stepTable) {
	t.Helper()
	for _, a := range as {
		for _, tt := range tables {
			t.Run(a.name+"/"+tt.name, func(t *testing.T) {
				x := mustNew(t, a, tt.limit)
				m := newModel(a.kind, tt.limit)
				var last time.Duration
				for _, s := range tt.steps {
					if got := x.AllowN(t0.Add(s.at), s.n); got != s.want {
						t.Errorf("AllowN(t0+%v, %d) = %+v, want %+v", s.at, s.n, got, s.want)
					}
					if m == nil || s.at < last {
						m = nil
						continue
					}
					last = s.at
					if want := m.allowN(t0.Add(s.at).UnixNano(), s.n); want != s.want {
						t.Errorf("the table says AllowN(t0+%v, %d) = %+v, but the model says %+v", s.at, s.n, s.want, want)
					}
				}
			})
		}
	}
}

func steps(groups ...[]step) []step {
	var ss []step
	for _, g := range groups {
		ss = append(ss, g...)
	}
	return ss
}

func one(at time.Duration, n int64, want Decision) []step {
	return []step{{at, n, want}}
}

// TestConcurrentCapacity hammers one limiter of each algorithm from 8
// goroutines at a single instant: exactly the capacity gets through, no
// more, no less. Run it with -race.
func TestConcurrentCapacity(t *testing.T) {
	const goroutines, capacity = 8, 1000
	l := PerSecond(capacity)
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			x := mustNew(t, a, l)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range 2 * capacity / goroutines {
						if x.AllowN(t0, 1).Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != capacity {
				t.Errorf("%d goroutines at one instant: %d allowed, want %d", goroutines, got, capacity)
			}
			if d := x.AllowN(t0, 0); d.Remaining != 0 {
				t.Errorf("AllowN(t0, 0) after the storm = %+v, want Remaining 0", d)
			}
		})
	}
	t.Run("LeakyQueue", func(t *testing.T) {
		q, err := NewLeakyQueue(l)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		releases := map[time.Time]int{}
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range 2 * capacity / goroutines {
					if at, d := q.Reserve(t0, 1); d.Allowed {
						mu.Lock()
						releases[at]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if len(releases) != capacity {
			t.Errorf("%d goroutines at one instant: %d distinct releases, want %d", goroutines, len(releases), capacity)
		}
		for k := range int64(capacity) {
			if at := t0.Add(time.Duration(k) * time.Millisecond); releases[at] != 1 {
				t.Errorf("release at t0+%v: %d requests, want 1", at.Sub(t0), releases[at])
			}
		}
	})
}

// TestCostAboveCapacity: a request larger than the capacity can never be
// allowed, whatever the state, and says so with Never.
func TestCostAboveCapacity(t *testing.T) {
	limits := []Limit{PerSecond(5), {Rate: 3, Period: time.Second, Burst: 7}, PerMinute(7), {Rate: 0, Period: time.Second, Burst: 2}, {Rate: 0, Period: time.Hour}}
	for _, a := range algorithms {
		for _, l := range limits {
			t.Run(fmt.Sprintf("%s/%v", a.name, l), func(t *testing.T) {
				x := mustNew(t, a, l)
				c := a.capacity(l)
				for _, at := range []time.Duration{0, time.Hour} {
					for _, n := range []int64{c + 1, c + 2, 2*c + 1, math.MaxInt64} {
						if d := x.AllowN(t0.Add(at), n); d.Allowed || d.RetryAfter != Never || d.Remaining != c || d.Limit != c || d.ResetAfter != 0 {
							t.Errorf("AllowN(t0+%v, %d) = %+v, want denied with RetryAfter Never and the limiter untouched", at, n, d)
						}
					}
				}
				if c > 0 {
					if d := x.AllowN(t0.Add(time.Hour), c); !d.Allowed {
						t.Errorf("AllowN(t0+1h, %d) = %+v, want allowed: the capacity fits", c, d)
					}
				}
			})
		}
	}
}
