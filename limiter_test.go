package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// strictStore validates rules as the real stores do, and counts its calls.
type strictStore struct{ calls int }

func (s *strictStore) Take(_ context.Context, _ time.Time, _ int64, checks []sluice.Check, out []sluice.Decision) error {
	s.calls++
	for i, c := range checks {
		if err := c.Rule.Validate(); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		out[i] = sluice.Decision{Allowed: true, Limit: c.Rule.Quota(), Remaining: c.Rule.Quota()}
	}
	return nil
}

// TestLimiterInvalidRule: a rule that is not valid is bad input, an
// error, not a store failure that a fail-open rule turns into an allowed
// request.
func TestLimiterInvalidRule(t *testing.T) {
	for _, r := range []sluice.Rule{
		{Name: "zero period", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1}},
		{Name: "negative rate", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: -1, Period: time.Second}},
		{Name: "no algorithm", Limit: sluice.PerSecond(1)},
		{Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)},
	} {
		t.Run(r.Name, func(t *testing.T) {
			st := &strictStore{}
			lim, err := sluice.NewLimiter(st)
			if err != nil {
				t.Fatal(err)
			}
			ok := &sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
			res, err := lim.Take(context.Background(), 1, []sluice.Check{{Rule: ok, Key: "k"}, {Rule: &r, Key: "k"}}, nil)
			if err == nil {
				t.Fatalf("Take with rule %+v = %+v, nil; want an error", r, res)
			}
			if errors.Is(err, context.Canceled) || st.calls != 0 {
				t.Fatalf("Take = %v after %d store calls; want the rule's error and no call", err, st.calls)
			}
		})
	}
}

// shedStore sheds every request, as a store with too much in flight
// does.
type shedStore struct{}

func (shedStore) Take(context.Context, time.Time, int64, []sluice.Check, []sluice.Decision) error {
	return fmt.Errorf("store: %w", sluice.ErrShed)
}

// TestLimiterShed: a request the store shed is denied, with RetryAfter
// ShedRetry, whatever its rules' failure modes, and nothing is taken from
// the fallback store; Result.Err says it was shed. A fail-open rule that
// allowed it would let a flood switch the limit off.
func TestLimiterShed(t *testing.T) {
	fallback := &strictStore{}
	lim, err := sluice.NewLimiter(shedStore{}, sluice.WithFallback(fallback))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []sluice.Failure{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		r := &sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(100), Failure: f}
		res, err := lim.Take(context.Background(), 1, []sluice.Check{{Rule: r, Key: "k"}}, nil)
		if err != nil || res.Allowed || res.RetryAfter != sluice.ShedRetry || !errors.Is(res.Err, sluice.ErrShed) {
			t.Errorf("failure %v: Take = %+v, %v; want denied, RetryAfter %v, Err wrapping ErrShed", f, res, err, sluice.ShedRetry)
		}
		if res.Decisions[0].Allowed || res.Decisions[0].Limit != 100 {
			t.Errorf("failure %v: decision %+v, want denied at limit 100", f, res.Decisions[0])
		}
	}
	if fallback.calls != 0 {
		t.Errorf("the fallback store was called %d times", fallback.calls)
	}
}

// TestLimiterRefused: a store's refusal is returned as an error; the
// rules' failure modes, even fail-open, are for a store that fails.
func TestLimiterRefused(t *testing.T) {
	lim, err := sluice.NewLimiter(teststore.Refusing{})
	if err != nil {
		t.Fatal(err)
	}
	open := &sluice.Rule{Name: "open", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
	res, err := lim.Take(context.Background(), 1, []sluice.Check{{Rule: open, Key: "k"}}, nil)
	if !errors.Is(err, sluice.ErrRefused) || res.Allowed {
		t.Errorf("Take = %+v, %v; want the refusal as an error", res, err)
	}
}

func TestLimiterCheckRule(t *testing.T) {
	near := &sluice.Rule{Name: "near", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
	far := &sluice.Rule{Name: "far", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}
	invalid := &sluice.Rule{Name: "invalid", Algorithm: "nope", Limit: sluice.PerSecond(1)}
	checking, _ := sluice.NewLimiter(teststore.Narrow{})
	plain, _ := sluice.NewLimiter(&strictStore{})
	for _, c := range []struct {
		lim  *sluice.Limiter
		r    *sluice.Rule
		want error
	}{
		{checking, near, nil},
		{checking, far, sluice.ErrRefused},
		{checking, invalid, sluice.ErrUnknownAlgo},
		{plain, far, nil}, // a store that checks nothing holds anything valid
	} {
		if err := c.lim.CheckRule(c.r); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckRule(%s) = %v, want %v", c.r.Name, err, c.want)
		}
	}
}

// hangingStore answers nothing until its context ends, and then says why.
type hangingStore struct{}

func (hangingStore) Take(ctx context.Context, _ time.Time, _ int64, _ []sluice.Check, _ []sluice.Decision) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// TestLimiterTimeoutCause: when the Limiter's bound on a store call runs
// out, the store's context ends with the cause ErrTimeout, which a store
// tells from its caller giving up, and the rule's failure mode decides.
func TestLimiterTimeoutCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := sluice.NewLimiter(hangingStore{}, sluice.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		r := &sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1), Failure: sluice.FailClosed}
		res, err := lim.Take(t.Context(), 1, []sluice.Check{{Rule: r, Key: "k"}}, nil)
		if err != nil || res.Allowed || !errors.Is(res.Err, sluice.ErrTimeout) || !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Errorf("Take past the Limiter's bound = %+v, %v; want denied (fail closed), Err wrapping ErrTimeout and DeadlineExceeded", res, err)
		}
	})
}

// TestCombineOne: the decision for one enforced check, which Combine
// returns without its loops, is what the loops make of it: here beside a
// shadow check, which they leave out.
func TestCombineOne(t *testing.T) {
	enforced := &sluice.Rule{Name: "e", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(5)}
	shadow := &sluice.Rule{Name: "s", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(5), Shadow: true}
	for _, d := range []sluice.Decision{
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond},
		{Allowed: false, Limit: 5, Remaining: 0, RetryAfter: time.Second, ResetAfter: time.Second},
		{Allowed: false, Limit: 5, RetryAfter: sluice.Never, ResetAfter: 0},
	} {
		one := sluice.Combine([]sluice.Check{{Rule: enforced}}, []sluice.Decision{d})
		two := sluice.Combine([]sluice.Check{{Rule: enforced}, {Rule: shadow}}, []sluice.Decision{d, {Allowed: true, Limit: 9, Remaining: 9}})
		if one != two {
			t.Errorf("sluice.Combine(%+v) = %+v, the general path makes %+v", d, one, two)
		}
	}
}
