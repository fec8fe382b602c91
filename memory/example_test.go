package memory_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// A policy of two rules, per second and per day, decided together: the
// fourth request is denied by the daily rule, and the per-second rule is
// not charged for it.
func ExampleStore() {
	store, err := memory.New(memory.WithMaxKeys(100_000))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	perSecond, err := sluice.Rule{Name: "per-second", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(2)}.Prepare()
	if err != nil {
		log.Fatal(err)
	}
	perDay, err := sluice.Rule{Name: "per-day", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(3)}.Prepare()
	if err != nil {
		log.Fatal(err)
	}
	checks := []sluice.Check{{Rule: perSecond, Key: "203.0.113.7"}, {Rule: perDay, Key: "203.0.113.7"}}
	out := make([]sluice.Decision, len(checks))

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 4 {
		if err := store.Take(context.Background(), now, checks, out); err != nil {
			log.Fatal(err)
		}
		d := sluice.Combine(checks, out)
		fmt.Printf("request %d: allowed %-5v per-second left %d, per-day left %d, retry after %v\n",
			i+1, d.Allowed, out[0].Remaining, out[1].Remaining, d.RetryAfter)
		now = now.Add(time.Second)
	}
	// Output:
	// request 1: allowed true  per-second left 1, per-day left 2, retry after 0s
	// request 2: allowed true  per-second left 1, per-day left 1, retry after 0s
	// request 3: allowed true  per-second left 1, per-day left 0, retry after 0s
	// request 4: allowed false per-second left 2, per-day left 0, retry after 11h59m57s
}

// The store under a sluice.Limiter, which reads the clock.
func ExampleNew() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lim, err := sluice.NewLimiter(store, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		log.Fatal(err)
	}
	rule, err := lim.Prepare(sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 1, Period: time.Second, Burst: 2}})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := lim.Take(context.Background(), []sluice.Check{{Rule: rule, Key: "alice"}}, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %-5v remaining %d retry after %v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed true  remaining 1 retry after 0s
	// allowed true  remaining 0 retry after 0s
	// allowed false remaining 0 retry after 1s
}
