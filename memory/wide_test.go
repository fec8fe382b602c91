package memory_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// A bucket rule whose tick horizon is short (12347 per second: ticks of
// 1/12347 ns, a horizon of days) keeps deciding exactly when its key sits
// untouched and unswept for longer than that, and when the clock goes
// back: the same decisions as the single-key token bucket.
func TestShortHorizonBucket(t *testing.T) {
	s, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.PerSecond(12347)
	rule, err := sluice.Rule{Name: "odd", Algorithm: sluice.AlgoTokenBucket, Limit: l}.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := sluice.NewTokenBucket(l)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	out := make([]sluice.Decision, 1)
	for i := range 2000 {
		switch rng.IntN(10) {
		case 0:
			now = now.Add(time.Duration(rng.IntN(30)+1) * 24 * time.Hour) // idle for days
		case 1:
			now = now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond) // the clock goes back
		default:
			now = now.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
		n := rng.Int64N(l.Rate + 2)
		if err := s.Take(context.Background(), now, []sluice.Check{{Rule: rule, Key: "k", Cost: n, Peek: n == 0}}, out); err != nil {
			t.Fatal(err)
		}
		if want := ref.AllowN(now, n); out[0] != want {
			t.Fatalf("step %d: Take(%v, %d) = %+v, want %+v", i, now, n, out[0], want)
		}
	}
}
