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
	"github.com/sluicehq/sluice/memory"
)

// prep prepares a rule a test declares, which is valid.
func prep(t testing.TB, r sluice.Rule) *sluice.PreparedRule {
	t.Helper()
	p, err := r.Prepare()
	if err != nil {
		t.Fatalf("%+v.Prepare() = %v", r, err)
	}
	return p
}

// strictStore allows everything and counts its calls.
type strictStore struct{ calls int }

func (s *strictStore) Take(_ context.Context, _ time.Time, checks []sluice.Check, out []sluice.Decision) error {
	s.calls++
	for i, c := range checks {
		out[i] = sluice.Decision{Allowed: true, Limit: c.Rule.Quota(), Remaining: c.Rule.Quota()}
	}
	return nil
}

// TestLimiterInvalidRule: a rule that is not valid cannot be prepared,
// and a check without a prepared rule, or asking a peek at a cost, is bad
// input, an error, not a store failure that a fail-open rule turns into
// an allowed request: the store is not called.
func TestLimiterInvalidRule(t *testing.T) {
	for _, r := range []sluice.Rule{
		{Name: "zero period", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1}},
		{Name: "negative rate", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: -1, Period: time.Second}},
		{Name: "no algorithm", Limit: sluice.PerSecond(1)},
		{Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)},
	} {
		if p, err := r.Prepare(); err == nil || p != nil {
			t.Errorf("%+v.Prepare() = %v, %v; want an error", r, p, err)
		}
	}
	ok := prep(t, sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	for name, bad := range map[string]sluice.Check{
		"nil rule":        {Key: "k"},
		"unprepared rule": {Rule: &sluice.PreparedRule{}, Key: "k"},
		"peek at a cost":  {Rule: ok, Key: "k", Peek: true, Cost: 3},
	} {
		t.Run(name, func(t *testing.T) {
			st := &strictStore{}
			lim, err := sluice.NewLimiter(st)
			if err != nil {
				t.Fatal(err)
			}
			res, err := lim.Take(context.Background(), []sluice.Check{{Rule: ok, Key: "k"}, bad}, nil)
			if err == nil {
				t.Fatalf("Take with %+v = %+v, nil; want an error", bad, res)
			}
			if errors.Is(err, context.Canceled) || st.calls != 0 {
				t.Fatalf("Take = %v after %d store calls; want the check's error and no call", err, st.calls)
			}
		})
	}
}

// shedStore sheds every request, as a store with too much in flight
// does.
type shedStore struct{}

func (shedStore) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
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
		r := prep(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(100), Failure: f})
		res, err := lim.Take(context.Background(), []sluice.Check{{Rule: r, Key: "k"}}, nil)
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
	open := prep(t, sluice.Rule{Name: "open", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	res, err := lim.Take(context.Background(), []sluice.Check{{Rule: open, Key: "k"}}, nil)
	if !errors.Is(err, sluice.ErrRefused) || res.Allowed {
		t.Errorf("Take = %+v, %v; want the refusal as an error", res, err)
	}
}

// TestLimiterPrepare: a Limiter prepares a rule only if it is valid and
// its store can hold it.
func TestLimiterPrepare(t *testing.T) {
	near := sluice.Rule{Name: "near", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
	far := sluice.Rule{Name: "far", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}
	invalid := sluice.Rule{Name: "invalid", Algorithm: "nope", Limit: sluice.PerSecond(1)}
	checking, _ := sluice.NewLimiter(teststore.Narrow{})
	plain, _ := sluice.NewLimiter(&strictStore{})
	for _, c := range []struct {
		lim  *sluice.Limiter
		r    sluice.Rule
		want error
	}{
		{checking, near, nil},
		{checking, far, sluice.ErrRefused},
		{checking, invalid, sluice.ErrUnknownAlgo},
		{plain, far, nil}, // a store that checks nothing holds anything valid
	} {
		p, err := c.lim.Prepare(c.r)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || (err == nil) != (p != nil) {
			t.Errorf("Prepare(%s) = %v, %v; want %v", c.r.Name, p, err, c.want)
		} else if p != nil && p.Rule() != c.r {
			t.Errorf("Prepare(%s).Rule() = %+v, want %+v", c.r.Name, p.Rule(), c.r)
		}
	}
}

// hangingStore answers nothing until its context ends, and then says why.
type hangingStore struct{}

func (hangingStore) Take(ctx context.Context, _ time.Time, _ []sluice.Check, _ []sluice.Decision) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// TestLimiterFailDefault: a rule that leaves Failure unset falls back to
// the Limiter's fallback store when it has one, and otherwise allows; the
// explicit modes do what they say with or without one.
func TestLimiterFailDefault(t *testing.T) {
	for _, c := range []struct {
		failure  sluice.Failure
		fallback bool
		want     []bool // three requests of a limit of 2 while the store is down
	}{
		{sluice.FailDefault, true, []bool{true, true, false}},
		{sluice.FailDefault, false, []bool{true, true, true}},
		{sluice.FailOpen, true, []bool{true, true, true}},
		{sluice.FailClosed, true, []bool{false, false, false}},
		{sluice.FailLocal, true, []bool{true, true, false}},
		{sluice.FailLocal, false, []bool{false, false, false}},
	} {
		t.Run(fmt.Sprintf("%v/fallback=%v", c.failure, c.fallback), func(t *testing.T) {
			var opts []sluice.LimiterOption
			if c.fallback {
				fb, err := memory.New()
				if err != nil {
					t.Fatal(err)
				}
				defer fb.Close()
				opts = append(opts, sluice.WithFallback(fb))
			}
			lim, err := sluice.NewLimiter(teststore.Failing{}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			r := prep(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(2), Failure: c.failure})
			for i, want := range c.want {
				res, err := lim.Take(context.Background(), []sluice.Check{{Rule: r, Key: "k"}}, nil)
				if err != nil || res.Err == nil || res.Allowed != want {
					t.Fatalf("request %d with the store down = %+v, %v; want Allowed %v and Err set", i, res, err, want)
				}
			}
		})
	}
}

// TestLimiterPassesDeadline: the Limiter adds no deadline of its own: the
// store sees the caller's context, and a caller's deadline that runs out
// is the caller's error, not a store failure for the rules to decide.
func TestLimiterPassesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := sluice.NewLimiter(hangingStore{})
		if err != nil {
			t.Fatal(err)
		}
		r := prep(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1), Failure: sluice.FailOpen})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		res, err := lim.Take(ctx, []sluice.Check{{Rule: r, Key: "k"}}, nil)
		if !errors.Is(err, context.DeadlineExceeded) || res.Allowed {
			t.Errorf("Take past the caller's deadline = %+v, %v; want the caller's DeadlineExceeded", res, err)
		}
	})
}

// TestCombineOne: the decision for one enforced check, which Combine
// returns without its loops, is what the loops make of it: here beside a
// shadow check, which they leave out.
func TestCombineOne(t *testing.T) {
	enforced := prep(t, sluice.Rule{Name: "e", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(5)})
	shadow := prep(t, sluice.Rule{Name: "s", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(5), Shadow: true})
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
