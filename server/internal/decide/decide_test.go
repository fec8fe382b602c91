package decide

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// combineDeclared decides a descriptor as sluice.Combine and
// sluice.Tightest do over its rules as the config declares them, whatever
// shadow mode the rules are checked in.
func TestCombineDeclaredAsCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 500 {
		k := 1 + rng.IntN(4)
		cs := make([]Check, k)
		own := make([]sluice.Check, k)
		ds := make([]sluice.Decision, k)
		for i := range k {
			declared := sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 10, Period: time.Second}, Shadow: rng.IntN(3) == 0}
			checked := declared
			checked.Shadow = declared.Shadow || n%2 == 0 // global shadow mode on every other round
			pc, err := checked.Prepare()
			if err != nil {
				t.Fatal(err)
			}
			pd, err := declared.Prepare()
			if err != nil {
				t.Fatal(err)
			}
			cs[i] = Check{Limit: &Limit{Rule: pc, Declared: declared}}
			own[i] = sluice.Check{Rule: pd}
			ds[i] = sluice.Decision{Allowed: rng.IntN(2) == 0, Limit: 10, Remaining: rng.Int64N(5),
				RetryAfter: time.Duration(rng.IntN(3)) * time.Second, ResetAfter: time.Duration(rng.IntN(3)) * time.Second}
		}
		got, gt := combineDeclared(cs, ds)
		if want, wt := sluice.Combine(own, ds), sluice.Tightest(own, ds); got != want || gt != wt {
			t.Fatalf("round %d: combineDeclared(%+v) = %+v, %d; want sluice.Combine's %+v, %d", n, ds, got, gt, want, wt)
		}
	}
}
