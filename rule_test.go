package sluice_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestRulePreparedOnce: a rule is compiled once and reused; a copy carries
// its preparation; a change is noticed and prepared anew, and a change
// back shares the state identity again.
func TestRulePreparedOnce(t *testing.T) {
	r := &sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	sp, err := r.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Spec(); again != sp {
		t.Errorf("Spec() twice: %p, then %p; want one compilation", sp, again)
	}
	c := *r
	if got, _ := c.Spec(); got != sp {
		t.Errorf("a copy's Spec() = %p, want its original's %p", got, sp)
	}
	r.Shadow = true // not part of the arithmetic
	if got, _ := r.Spec(); got != sp {
		t.Errorf("after Shadow changed, Spec() = %p, want %p", got, sp)
	}

	r.Limit = sluice.PerSecond(20)
	sp2, err := r.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if sp2 == sp || sp2.Ident == sp.Ident || sp2.Quota() != 20 {
		t.Errorf("after the limit changed: quota %d, same Ident %v; want a new Spec of quota 20", sp2.Quota(), sp2.Ident == sp.Ident)
	}
	if got, _ := c.Spec(); got != sp {
		t.Errorf("the copy after its original changed: Spec() = %p, want %p", got, sp)
	}
	r.Limit = sluice.PerSecond(10)
	if sp3, _ := r.Spec(); sp3.Ident != sp.Ident {
		t.Errorf("changed back: Ident differs from the first Spec's; want the same state identity")
	}
}

// TestRuleRenamedInPlace: a name or algorithm changed to another of the
// same length is noticed, as a change of length is; the same bytes at
// another address are no change.
func TestRuleRenamedInPlace(t *testing.T) {
	r := &sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(10)}
	sp, err := r.Spec()
	if err != nil {
		t.Fatal(err)
	}
	r.Name = strings.Clone("api")
	if got, _ := r.Spec(); got != sp {
		t.Errorf("the name's bytes copied: Spec() = %p, want %p", got, sp)
	}
	r.Name = "web"
	web, _ := r.Spec()
	if web == sp || web.Ident == sp.Ident || web.Key.Name != "web" {
		t.Errorf("renamed to web: Spec() = %+v, want a new Spec named web", web.Key)
	}
	r.Algorithm = sluice.AlgoLeakyBucket // as long as token_bucket
	if got, _ := r.Spec(); got == web || got.Key.Algo != string(sluice.AlgoLeakyBucket) {
		t.Errorf("leaky_bucket for token_bucket: Spec() = %+v, want a new Spec of leaky_bucket", got.Key)
	}
}

// TestRuleInvalidAfterChange: a rule made invalid after it was prepared
// reports its error at its next use, and recovers when fixed.
func TestRuleInvalidAfterChange(t *testing.T) {
	r := &sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(5)}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(*sluice.Rule)
		want   error
	}{
		{"zero period", func(r *sluice.Rule) { r.Limit.Period = 0 }, sluice.ErrInvalidLimit},
		{"unknown algorithm", func(r *sluice.Rule) { r.Algorithm = "gcra2" }, sluice.ErrUnknownAlgo},
		{"too large", func(r *sluice.Rule) { r.Limit = sluice.Limit{Rate: 3, Period: time.Second, Burst: 1 << 40} }, sluice.ErrLimitTooLarge},
		{"no name", func(r *sluice.Rule) { r.Name = "" }, nil},
		{"failure mode", func(r *sluice.Rule) { r.Failure = 9 }, nil},
	} {
		good := *r
		c.change(r)
		_, err := r.Spec()
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Spec() = %v, want an error wrapping %v", c.name, err, c.want)
		}
		if verr := r.Validate(); verr == nil || verr.Error() != err.Error() {
			t.Errorf("%s: Validate() = %v, want Spec's %v", c.name, verr, err)
		}
		*r = good
		if _, err := r.Spec(); err != nil {
			t.Errorf("%s, fixed: Spec() = %v, want nil", c.name, err)
		}
	}
}

// TestRuleConcurrentFirstUse: goroutines using a fresh rule at once all
// get its Spec, one of equivalent compilations (run with -race).
func TestRuleConcurrentFirstUse(t *testing.T) {
	r := &sluice.Rule{Name: "api", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerHour(100)}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if sp, err := r.Spec(); err != nil || sp.Quota() != 100 {
				t.Errorf("Spec() = %v, %v; want quota 100", sp, err)
			}
		})
	}
	wg.Wait()
}

// TestRuleEqual: Equal compares the fields, not the preparations.
func TestRuleEqual(t *testing.T) {
	a := sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}
	b := a
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if !a.Equal(&b) || !b.Equal(&a) {
		t.Errorf("a prepared rule and its unprepared twin: Equal = false, want true")
	}
	for _, change := range []func(*sluice.Rule){
		func(r *sluice.Rule) { r.Name = "web" },
		func(r *sluice.Rule) { r.Algorithm = sluice.AlgoTokenBucket },
		func(r *sluice.Rule) { r.Limit.Burst = 20 },
		func(r *sluice.Rule) { r.Shadow = true },
		func(r *sluice.Rule) { r.Failure = sluice.FailClosed },
	} {
		c := a
		change(&c)
		if a.Equal(&c) {
			t.Errorf("%+v Equal %+v, want false", &a, &c)
		}
	}
}
