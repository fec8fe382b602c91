package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// left peeks at what p's key k has left at t0.
func left(t *testing.T, st sluice.Store, t0 time.Time, p *sluice.PreparedRule, k string) int64 {
	t.Helper()
	out := make([]sluice.Decision, 1)
	if err := st.Take(context.Background(), t0, []sluice.Check{{Rule: p, Key: k, Peek: true}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Remaining
}

// TestRulePrepared: a prepared rule is what its declaration was when it
// was prepared; changing the declaration afterwards changes nothing it
// decides.
func TestRulePrepared(t *testing.T) {
	r := sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}
	p := prep(t, r)
	r.Limit = sluice.PerSecond(1)
	r.Shadow = true
	if got, want := p.Rule(), (sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}); got != want {
		t.Fatalf("Rule() after the declaration changed = %+v, want %+v", got, want)
	}
	if p.Name() != "api" || p.Shadow() || p.Quota() != 10 {
		t.Errorf("Name, Shadow, Quota = %q, %v, %d; want api, false, 10", p.Name(), p.Shadow(), p.Quota())
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := left(t, st, time.Unix(1_700_000_000, 0), p, "k"); n != 10 {
		t.Errorf("a fresh key of the prepared rule has %d left, want 10", n)
	}
}

// TestRulePreparedShareState: rules prepared apart from equal
// declarations, or from ones that differ only in shadow or failure mode or
// charge, share their keys' states in a store; a rule whose name,
// algorithm or limit differs has states of its own.
func TestRulePreparedShareState(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	base := sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(5)}
	for _, c := range []struct {
		name   string
		change func(*sluice.Rule)
		shared bool
	}{
		{"equal", func(*sluice.Rule) {}, true},
		{"shadow", func(r *sluice.Rule) { r.Shadow = true }, true},
		{"failure", func(r *sluice.Rule) { r.Failure = sluice.FailClosed }, true},
		{"charge", func(r *sluice.Rule) { r.Charge = sluice.ChargeUsage }, true},
		{"name", func(r *sluice.Rule) { r.Name = "web" }, false},
		{"algorithm", func(r *sluice.Rule) { r.Algorithm = sluice.AlgoLeakyBucket }, false},
		{"limit", func(r *sluice.Rule) { r.Limit.Burst = 6 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			other := base
			c.change(&other)
			a, b := prep(t, base), prep(t, other)
			out := make([]sluice.Decision, 1)
			if err := st.Take(context.Background(), t0, []sluice.Check{{Rule: a, Key: "k", Cost: 5}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("spending the first rule: %+v, %v", out[0], err)
			}
			if n := left(t, st, t0, b, "k"); (n == 0) != c.shared {
				t.Errorf("after the first rule was spent, the second has %d left; shared: %v", n, c.shared)
			}
		})
	}
}

// TestRulePrepareInvalid: an invalid declaration is not prepared, with an
// error that says why; Validate says the same.
func TestRulePrepareInvalid(t *testing.T) {
	base := sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(5)}
	for _, c := range []struct {
		name   string
		change func(*sluice.Rule)
		want   error // nil: any error
	}{
		{"zero period", func(r *sluice.Rule) { r.Limit.Period = 0 }, sluice.ErrInvalidLimit},
		{"negative burst", func(r *sluice.Rule) { r.Limit.Burst = -1 }, sluice.ErrInvalidLimit},
		{"unknown algorithm", func(r *sluice.Rule) { r.Algorithm = "gcra2" }, sluice.ErrUnknownAlgo},
		{"no algorithm", func(r *sluice.Rule) { r.Algorithm = "" }, sluice.ErrUnknownAlgo},
		{"too large", func(r *sluice.Rule) { r.Limit = sluice.Limit{Rate: 3, Period: time.Second, Burst: 1<<62 + 1} }, sluice.ErrLimitTooLarge},
		{"no name", func(r *sluice.Rule) { r.Name = "" }, nil},
		{"failure mode", func(r *sluice.Rule) { r.Failure = 9 }, nil},
		{"charge", func(r *sluice.Rule) { r.Charge = 9 }, nil},
	} {
		r := base
		c.change(&r)
		p, err := r.Prepare()
		if err == nil || p != nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Prepare() = %v, %v; want an error wrapping %v", c.name, p, err, c.want)
		}
		if verr := r.Validate(); verr == nil || err == nil || verr.Error() != err.Error() {
			t.Errorf("%s: Validate() = %v, want Prepare's error %v", c.name, verr, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a valid rule: Validate() = %v", err)
	}
}

// TestRuleEqual: == compares declarations field by field.
func TestRuleEqual(t *testing.T) {
	a := sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}
	b := a
	prep(t, a)
	if a != b {
		t.Errorf("a rule and its copy, one prepared: == is false, want true")
	}
	for _, change := range []func(*sluice.Rule){
		func(r *sluice.Rule) { r.Name = "web" },
		func(r *sluice.Rule) { r.Algorithm = sluice.AlgoTokenBucket },
		func(r *sluice.Rule) { r.Limit.Burst = 20 },
		func(r *sluice.Rule) { r.Shadow = true },
		func(r *sluice.Rule) { r.Failure = sluice.FailClosed },
		func(r *sluice.Rule) { r.Charge = sluice.ChargeUsage },
	} {
		c := a
		change(&c)
		if a == c {
			t.Errorf("%+v == %+v, want false", a, c)
		}
	}
}
