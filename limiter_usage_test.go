package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// TestLimiterUsageFallback: while the store is down, a usage rule that
// fails local is recorded by the fallback as it would have been by the
// store: past what is left, and also when a fail-closed rule denies the
// request; Result.Err says the charge missed the store.
func TestLimiterUsageFallback(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := sluice.ClockFunc(func() time.Time { return now })
	fb, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	lim, err := sluice.NewLimiter(downStore{}, sluice.WithClock(clock), sluice.WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	tokens := prep(t, sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(100), Failure: sluice.FailLocal, Charge: sluice.ChargeUsage})
	closed := prep(t, sluice.Rule{Name: "closed", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10), Failure: sluice.FailClosed})
	ctx := context.Background()

	res, err := lim.Take(ctx, []sluice.Check{{Rule: tokens, Key: "k", Cost: 60}, {Rule: closed, Key: "k", Peek: true}}, nil)
	if err != nil || res.Err == nil || res.Allowed || !res.Decisions[0].Allowed || res.Decisions[0].Remaining != 40 {
		t.Fatalf("60 tokens beside a fail-closed rule: %+v, %v; want denied, the tokens recorded locally (40 left), Err set", res, err)
	}
	res, err = lim.Take(ctx, []sluice.Check{{Rule: tokens, Key: "k", Cost: 150}}, nil)
	if err != nil || res.Err == nil || res.Allowed || res.Decisions[0].RetryAfter != sluice.Never {
		t.Fatalf("150 tokens: %+v, %v; want denied with Never, Err set", res, err)
	}
	res, err = lim.Take(ctx, []sluice.Check{{Rule: tokens, Key: "k", Peek: true}}, nil)
	if err != nil || res.Allowed || res.Remaining != 0 {
		t.Fatalf("the check of cost 0 after 210 of 100: %+v, %v; want denied, in debt", res, err)
	}
}

// TestLimiterUsageLLM: the token budget of an LLM gateway through a
// Limiter over the memory store: peek on the way in, charge
// the tokens used on the way out. Once a charge takes the budget past
// zero, every check is denied until it drains.
func TestLimiterUsageLLM(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim, err := sluice.NewLimiter(st, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		t.Fatal(err)
	}
	llm := prep(t, sluice.Rule{Name: "llm", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerHour(100), Charge: sluice.ChargeUsage})
	budget := []sluice.Check{{Rule: llm, Key: "api-key", Peek: true}}
	charge := []sluice.Check{{Rule: llm, Key: "api-key", Cost: 150}}
	for i := range 20 {
		res, err := lim.Take(context.Background(), budget, nil)
		if err != nil || res.Allowed != (i == 0) {
			t.Fatalf("round %d: check = %+v, %v; want Allowed %v", i, res, err, i == 0)
		}
		if !res.Allowed && res.RetryAfter <= 0 {
			t.Fatalf("round %d: a denied check with RetryAfter %v", i, res.RetryAfter)
		}
		if _, err := lim.Take(context.Background(), charge, nil); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	// The debt is capped at one budget: two hours after the last charge,
	// the whole budget is back.
	now = now.Add(2 * time.Hour)
	if res, err := lim.Take(context.Background(), budget, nil); err != nil || !res.Allowed || res.Remaining != 100 {
		t.Fatalf("two hours later: %+v, %v; want allowed with 100 left", res, err)
	}
}
