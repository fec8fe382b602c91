package sluice_test

import (
	"context"
	"errors"
	"strings"
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

// TestRuleLeaseInvalid: a leased rule is refused, with an error naming the
// rule and the reason, for an algorithm that cannot be decided on a share,
// a rule charged by usage, a quota too large to divide exactly, and times
// that make no sense; the same rule without the lease is valid.
func TestRuleLeaseInvalid(t *testing.T) {
	base := sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}}
	for _, c := range []struct {
		name   string
		change func(*sluice.Rule)
		want   string // in the error, beside the rule's name
	}{
		{"sliding log", func(r *sluice.Rule) { r.Algorithm = sluice.AlgoSlidingLog }, "sliding_log cannot be leased"},
		{"sliding counter", func(r *sluice.Rule) { r.Algorithm = sluice.AlgoSlidingCounter }, "sliding_counter cannot be leased"},
		{"usage", func(r *sluice.Rule) { r.Charge = sluice.ChargeUsage }, "charged by usage cannot be leased"},
		{"count", func(r *sluice.Rule) { r.Charge = sluice.ChargeCount }, "charged by count cannot be leased"},
		{"rate", func(r *sluice.Rule) { r.Limit.Rate = sluice.MaxLeaseQuota + 1 }, "rate 33554433 is above 33554432"},
		{"burst", func(r *sluice.Rule) { r.Limit.Burst = sluice.MaxLeaseQuota + 1 }, "burst 33554433 is above"},
		{"negative renew", func(r *sluice.Rule) { r.Lease.Renew = -time.Second }, "renew -1s must not be negative"},
		{"negative ttl", func(r *sluice.Rule) { r.Lease.TTL = -time.Second }, "ttl -1s must not be negative"},
		{"renew past period", func(r *sluice.Rule) { r.Lease.Renew = 2 * time.Second }, "renew 2s must not be longer than the period 1s"},
		{"ttl too long", func(r *sluice.Rule) { r.Lease.TTL = 200 * time.Hour }, "must be at most 24h and 168h"},
		{"renew too long", func(r *sluice.Rule) { r.Limit.Period, r.Lease.Renew = 48*time.Hour, 25*time.Hour }, "must be at most 24h and 168h"},
		{"renew too short", func(r *sluice.Rule) { r.Lease.Renew = time.Millisecond }, "renew 1ms is shorter than the minimum, 10ms"},
		{"default renew too short", func(r *sluice.Rule) { r.Limit.Period = 5 * time.Millisecond }, "renew 5ms (the default for period 5ms and ttl 0s) is shorter than the minimum, 10ms"},
		{"ttl too short", func(r *sluice.Rule) { r.Lease.TTL = 5 * time.Millisecond }, "is shorter than the minimum, 10ms"},
		{"ttl below renew", func(r *sluice.Rule) { r.Lease.Renew, r.Lease.TTL = 500*time.Millisecond, 100*time.Millisecond }, "ttl 100ms must not be shorter than renew 500ms"},
	} {
		r := base
		c.change(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), `rule "api"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error naming rule \"api\" and saying %q", c.name, err, c.want)
		}
		r.Lease = sluice.Lease{}
		if err := r.Validate(); err != nil && c.name != "rate" && c.name != "burst" {
			t.Errorf("%s without the lease: Validate() = %v", c.name, err)
		}
	}
	for _, a := range []sluice.Algo{sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA, sluice.AlgoFixedWindow} {
		r := base
		r.Algorithm = a
		r.Lease = sluice.Lease{Enabled: true, Renew: 100 * time.Millisecond, TTL: time.Second}
		if err := r.Validate(); err != nil {
			t.Errorf("a %s lease: Validate() = %v", a, err)
		}
	}
}

// TestLeaseTimes: the defaults of a lease's renewal and time to live.
func TestLeaseTimes(t *testing.T) {
	for _, c := range []struct {
		lease             sluice.Lease
		period            time.Duration
		wantRenew, wantTT time.Duration
	}{
		{sluice.Lease{}, time.Second, 100 * time.Millisecond, 300 * time.Millisecond},
		{sluice.Lease{}, time.Hour, 10 * time.Second, 30 * time.Second},
		{sluice.Lease{}, 100 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond},
		{sluice.Lease{}, 20 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond},
		{sluice.Lease{Renew: 200 * time.Millisecond}, time.Second, 200 * time.Millisecond, 600 * time.Millisecond},
		{sluice.Lease{TTL: 60 * time.Millisecond}, time.Second, 60 * time.Millisecond, 60 * time.Millisecond},
		{sluice.Lease{TTL: 5 * time.Second}, time.Second, 100 * time.Millisecond, 5 * time.Second},
	} {
		renew, ttl := c.lease.Times(c.period)
		if renew != c.wantRenew || ttl != c.wantTT {
			t.Errorf("%+v.Times(%v) = %v, %v; want %v, %v", c.lease, c.period, renew, ttl, c.wantRenew, c.wantTT)
		}
	}
}
