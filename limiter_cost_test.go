package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

type downStore struct{}

func (downStore) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return errors.New("store down")
}

// TestLimiterCheckCost: a check's own Cost is what it is charged, by the
// store and by the local fallback; a request that a fail-closed rule
// denies while the store is down charges the fallback nothing, whatever
// its checks' costs.
func TestLimiterCheckCost(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := sluice.ClockFunc(func() time.Time { return now })
	perSecond := prep(t, sluice.Rule{Name: "per-second", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)})
	tokens := prep(t, sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(100)})

	up, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	lim, err := sluice.NewLimiter(up, sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	// One request, two units: 1 per-second, 60 tokens.
	req := []sluice.Check{{Rule: perSecond, Key: "u"}, {Rule: tokens, Key: "u", Cost: 60}}
	res, err := lim.Take(context.Background(), req, nil)
	if err != nil || !res.Allowed || res.Decisions[0].Remaining != 9 || res.Decisions[1].Remaining != 40 {
		t.Fatalf("first request: %+v, %v; want allowed, 9 and 40 left", res, err)
	}
	// The second would take 60 tokens of 40: denied, and the per-second
	// rule is not charged either.
	res, err = lim.Take(context.Background(), req, nil)
	if err != nil || res.Allowed || res.Decisions[0].Remaining != 9 || res.Decisions[1].Remaining != 40 {
		t.Fatalf("second request: %+v, %v; want denied, nothing charged (9 and 40 left)", res, err)
	}

	fb, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	lim, err = sluice.NewLimiter(downStore{}, sluice.WithClock(clock), sluice.WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	local := prep(t, sluice.Rule{Name: "local", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10), Failure: sluice.FailLocal})
	closed := prep(t, sluice.Rule{Name: "closed", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10), Failure: sluice.FailClosed})
	res, err = lim.Take(context.Background(), []sluice.Check{{Rule: local, Key: "u", Cost: 4}}, nil)
	if err != nil || res.Err == nil || !res.Allowed || res.Decisions[0].Remaining != 6 {
		t.Fatalf("fallback: %+v, %v; want allowed locally with 6 left of 10", res, err)
	}
	res, err = lim.Take(context.Background(), []sluice.Check{{Rule: local, Key: "u", Cost: 4}, {Rule: closed, Key: "u"}}, nil)
	if err != nil || res.Allowed || res.Decisions[0].Remaining != 6 {
		t.Fatalf("fallback beside a fail-closed rule: %+v, %v; want denied, the local state reported uncharged (6 left)", res, err)
	}
	res, err = lim.Take(context.Background(), []sluice.Check{{Rule: local, Key: "u", Cost: 4}}, nil)
	if err != nil || !res.Allowed || res.Decisions[0].Remaining != 2 {
		t.Fatalf("fallback again: %+v, %v; want allowed with 2 left", res, err)
	}
}
