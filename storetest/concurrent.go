package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
)

const (
	goroutines = 16
	quota      = 100 // the shared key's quota
)

// hammer runs f(g) in goroutines g = 0..15 at once and waits for them. f
// reports an error instead of failing, since only the test's goroutine
// may stop the test.
func hammer(t *testing.T, f func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[g] = f(g)
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// testConcurrent: 16 goroutines asking for one unit at a time of one key,
// all at the same time, are allowed exactly the quota in total.
func (s *suite) testConcurrent(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			if !s.fits(sluice.PerHour(quota)) {
				t.Skipf("quota %d is above MaxRate %d", quota, s.cfg.MaxRate)
			}
			st := s.cfg.New(t)
			c := sluice.Check{Rule: rule("concurrent", a, sluice.PerHour(quota)), Key: "shared"}
			t0 := s.t0()
			allowed := make([]int64, goroutines)
			hammer(t, func(g int) error {
				out := make([]sluice.Decision, 1)
				for range quota/goroutines + 4 {
					if err := st.Take(context.Background(), t0, []sluice.Check{c}, out); err != nil {
						return err
					}
					if out[0].Allowed {
						allowed[g]++
					}
				}
				return nil
			})
			if total := sum(allowed); total != quota {
				t.Errorf("%d goroutines at one time were allowed %d in total, want exactly %d", goroutines, total, quota)
			}
			if got := peek(t, st, t0, c); got.Remaining != 0 {
				t.Errorf("after the quota was taken: %+v, want Remaining 0", got)
			}
		})
	}
}

// testConcurrentPolicy: each goroutine has a key of its own under one rule
// (10 each) and shares a key under another (100 in all). Exactly 100 pass,
// and each goroutine's own key is charged exactly what it was allowed: a
// denial by the shared key charges nothing, however the calls interleave.
func (s *suite) testConcurrentPolicy(t *testing.T) {
	const own = 10
	as := s.cfg.Algorithms
	for i, a := range as {
		b := as[(i+1)%len(as)]
		t.Run(fmt.Sprintf("%s+%s", a, b), func(t *testing.T) {
			if !s.fits(sluice.PerHour(quota)) {
				t.Skipf("quota %d is above MaxRate %d", quota, s.cfg.MaxRate)
			}
			st := s.cfg.New(t)
			mine := rule("policy-own", a, sluice.PerHour(own))
			shared := sluice.Check{Rule: rule("policy-shared", b, sluice.PerHour(quota)), Key: "shared"}
			t0 := s.t0()
			allowed := make([]int64, goroutines)
			hammer(t, func(g int) error {
				checks := []sluice.Check{{Rule: mine, Key: fmt.Sprint("g", g)}, shared}
				out := make([]sluice.Decision, len(checks))
				for range 2 * own {
					if err := st.Take(context.Background(), t0, checks, out); err != nil {
						return err
					}
					if out[0].Allowed && out[1].Allowed {
						allowed[g]++
					}
				}
				return nil
			})
			if total := sum(allowed); total != quota {
				t.Errorf("%d goroutines were allowed %d in total, want exactly %d", goroutines, total, quota)
			}
			for g := range goroutines {
				c := sluice.Check{Rule: mine, Key: fmt.Sprint("g", g)}
				if got := peek(t, st, t0, c); got.Remaining != own-allowed[g] {
					t.Errorf("goroutine %d was allowed %d; its own key has Remaining %d, want %d", g, allowed[g], got.Remaining, own-allowed[g])
				}
			}
			if got := peek(t, st, t0, shared); got.Remaining != 0 {
				t.Errorf("the shared key after %d allowed: %+v, want Remaining 0", quota, got)
			}
		})
	}
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
