package decide

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// combineDeclared decides a descriptor as sluice.Combine does over its
// rules as the config declares them, whatever shadow mode the rules are
// checked in, and reports one of them whole, its limit, remaining and
// reset: of those Combine weighs, the first that denied, else
// sluice.Tightest's.
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
		want, wt := sluice.Combine(own, ds), sluice.Tightest(own, ds)
		enforced := slices.ContainsFunc(own, func(c sluice.Check) bool { return !c.Rule.Shadow() })
		for i := range ds {
			if !ds[i].Allowed && (!enforced || !own[i].Rule.Shadow()) {
				wt = i
				break
			}
		}
		want.Limit, want.Remaining, want.ResetAfter = ds[wt].Limit, ds[wt].Remaining, ds[wt].ResetAfter
		if got != want || gt != wt {
			t.Fatalf("round %d: combineDeclared(%+v) = %+v, %d; want sluice.Combine's allowed and retry with check %d's limit, remaining and reset: %+v", n, ds, got, gt, wt, want)
		}
	}
}
