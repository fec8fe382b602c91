package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// BenchmarkTake decides one GCRA request through Store.Take: for a key
// held (the hot path), and for a new key in a full store, which evicts a
// live key for it, with none or half of the keys denying (which eviction
// passes over).
func BenchmarkTake(b *testing.B) {
	const held = 1 << 16
	keys := make([]string, 4*held)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		fresh   bool
		denying int // every denying-th key held is spent
	}{{"key=held", false, 0}, {"key=new/denying=none", true, 0}, {"key=new/denying=half", true, 2}} {
		b.Run(c.name, func(b *testing.B) {
			st, err := memory.New(memory.WithMaxKeys(held), memory.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			rule, err := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(2)}.Prepare()
			if err != nil {
				b.Fatal(err)
			}
			checks := make([]sluice.Check, 1)
			out := make([]sluice.Decision, 1)
			for i := range held {
				checks[0] = sluice.Check{Rule: rule, Key: keys[i], Cost: 1}
				if c.denying > 0 && i%c.denying == 0 {
					checks[0].Cost = 2
				}
				if err := st.Take(ctx, now, checks, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := keys[i%held]
				if c.fresh {
					k = keys[held+i%(3*held)]
				}
				checks[0] = sluice.Check{Rule: rule, Key: k, Peek: true}
				if err := st.Take(ctx, now, checks, out); err != nil {
					b.Fatal(err)
				}
				if c.fresh {
					checks[0].Peek = false
					if err := st.Take(ctx, now, checks, out); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
