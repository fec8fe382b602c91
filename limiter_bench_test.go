package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// BenchmarkLimiterTake: one request through a Limiter over the memory
// store, on one key held in the store: the path every middleware takes.
func BenchmarkLimiterTake(b *testing.B) {
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Unix(1_700_000_000, 0)
	lim, err := sluice.NewLimiter(st, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		rules []sluice.Rule
	}{
		{"checks=1", []sluice.Rule{{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1 << 30)}}},
		{"checks=2", []sluice.Rule{
			{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1 << 30)},
			{Name: "per-day", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(1 << 40)},
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			checks := make([]sluice.Check, len(c.rules))
			for i, r := range c.rules {
				p, err := lim.Prepare(r)
				if err != nil {
					b.Fatal(err)
				}
				checks[i] = sluice.Check{Rule: p, Key: "203.0.113.7"}
			}
			out := make([]sluice.Decision, len(checks))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := lim.Take(ctx, checks, out)
				if err != nil || !res.Allowed {
					b.Fatal(res, err)
				}
			}
		})
	}
}
