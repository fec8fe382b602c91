package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testclock"
)

// A flood of new keys into a full store never resets a key that denies:
// a client that spent its 100 an hour is still denied after 100,000 new
// keys have passed through a store bounded to 4 MiB, for every
// algorithm, and the keys that made room were live ones that still
// allowed. (Under the race detector, 25,000 keys through 1 MiB: about as many
// times the store's room, a quarter of the work.)
func TestFloodKeepsDenyingKey(t *testing.T) {
	maxBytes, fresh := int64(4<<20), 100_000
	if raceEnabled {
		maxBytes, fresh = 1<<20, 25_000
	}
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			st, err := New(WithMaxBytes(maxBytes), WithSweepInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			clock := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			lim, err := sluice.NewLimiter(st, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			rule := prep(sluice.Rule{Name: "per-client", Algorithm: a, Limit: sluice.PerHour(100)})
			ctx := context.Background()
			spent := []sluice.Check{{Rule: rule, Key: "attacker"}}
			for i := range 101 {
				res, err := lim.Take(ctx, spent, nil)
				if err != nil || res.Allowed != (i < 100) {
					t.Fatalf("attacker's request %d: %+v, %v; want allowed %v", i+1, res.Decision, err, i < 100)
				}
			}
			checks := make([]sluice.Check, 1)
			out := make([]sluice.Decision, 1)
			for i := range fresh {
				clock.Advance(time.Microsecond) // 0.1s in all: no bucket refills a unit (36s)
				checks[0] = sluice.Check{Rule: rule, Key: fmt.Sprintf("client-%06d", i)}
				res, err := lim.Take(ctx, checks, out)
				if err != nil || !res.Allowed || res.Err != nil {
					t.Fatalf("new key %d: %+v, %v, store error %v; want allowed by the store", i, res.Decision, err, res.Err)
				}
			}
			res, err := lim.Take(ctx, spent, nil)
			if err != nil || res.Allowed || res.Err != nil {
				t.Errorf("attacker after %d new keys: %+v, %v, store error %v; want denied by the store", fresh, res.Decision, err, res.Err)
			}
			s := st.Stats()
			if s.EvictedLive == 0 || s.Refused != 0 || s.Bytes > maxBytes {
				t.Errorf("Stats() = %+v, want live evictions, no refusal, at most %d bytes", s, maxBytes)
			}
		})
	}
}

// A store full of keys that deny refuses a new key with ErrFull, which
// wraps sluice.ErrNoRoom, charging nothing; a Limiter then decides it by
// the rule's failure mode, "local" as "open" (the fallback would be
// memory too), and the denying keys are all still denied.
func TestFullOfDenyingKeys(t *testing.T) {
	st, err := New(WithMaxKeys(64), WithShards(1), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	rule := prep(sluice.Rule{Name: "once", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(1)})
	out := make([]sluice.Decision, 1)
	for i := range 64 {
		if err := st.Take(ctx, now, []sluice.Check{{Rule: rule, Key: fmt.Sprint(i)}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("key %d: %+v, %v; want allowed", i, out[0], err)
		}
	}
	err = st.Take(ctx, now, []sluice.Check{{Rule: rule, Key: "new"}}, out)
	if !errors.Is(err, ErrFull) || !errors.Is(err, sluice.ErrNoRoom) || errors.Is(err, sluice.ErrRefused) {
		t.Fatalf("Take on a new key in a store full of denying keys = %v, want ErrFull wrapping sluice.ErrNoRoom, not ErrRefused", err)
	}
	if s := st.Stats(); s.Refused != 1 || s.EvictedIdle+s.EvictedLive != 0 || s.Keys != 64 {
		t.Errorf("Stats() = %+v, want 1 refusal, no eviction, 64 keys", s)
	}

	lim, err := sluice.NewLimiter(st, sluice.WithClock(testclock.New(now)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f     sluice.Failure
		allow bool
	}{{sluice.FailOpen, true}, {sluice.FailClosed, false}, {sluice.FailLocal, true}} {
		r := prep(sluice.Rule{Name: "once", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(1), Failure: c.f})
		res, err := lim.Take(ctx, []sluice.Check{{Rule: r, Key: "new"}}, nil)
		if err != nil || res.Allowed != c.allow || !errors.Is(res.Err, ErrFull) {
			t.Errorf("failure %v: %+v, %v, store error %v; want allowed %v by the failure mode", c.f, res.Decision, err, res.Err, c.allow)
		}
	}
	// As the fallback of a store that fails, the full store decides a
	// rule that fails local as one that fails open too.
	lim, err = sluice.NewLimiter(downStore{}, sluice.WithClock(testclock.New(now)), sluice.WithFallback(st))
	if err != nil {
		t.Fatal(err)
	}
	r := prep(sluice.Rule{Name: "once", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(1), Failure: sluice.FailLocal})
	if res, err := lim.Take(ctx, []sluice.Check{{Rule: r, Key: "new"}}, nil); err != nil || !res.Allowed {
		t.Errorf("failure local, the fallback full: %+v, %v; want allowed", res.Decision, err)
	}
	if res, err := lim.Take(ctx, []sluice.Check{{Rule: r, Key: "0"}}, nil); err != nil || res.Allowed {
		t.Errorf("failure local, a spent key in the fallback: %+v, %v; want denied", res.Decision, err)
	}
	for i := range 64 {
		if err := st.Take(ctx, now, []sluice.Check{{Rule: rule, Key: fmt.Sprint(i)}}, out); err != nil || out[0].Allowed {
			t.Fatalf("key %d after the refusals: %+v, %v; want denied", i, out[0], err)
		}
	}
}

// downStore is a store that always fails.
type downStore struct{}

func (downStore) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return errors.New("down")
}

// A request that brings a new key to a store full of denying keys is still
// denied when a key the store holds denies it: a new key riding along must
// not hand a spent key to the failure modes, which would let it through.
// When every held key allows, the request goes to the failure modes as a
// lone new key does, and nothing is charged.
func TestFullStoreKeepsHeldKeyDenied(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	perIP := prep(sluice.Rule{Name: "ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(1)})
	perKey := prep(sluice.Rule{Name: "key", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(5)})
	roomy := prep(sluice.Rule{Name: "roomy", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerHour(10)})
	// full returns a store of 64 keys: the 64 - len(allowing) spent keys
	// "0", "1", ... of perIP, and the keys named, charged once by roomy.
	full := func(allowing ...string) (*Store, *sluice.Limiter) {
		st, err := New(WithMaxKeys(64), WithShards(1), WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out := make([]sluice.Decision, 1)
		for _, k := range allowing {
			if err := st.Take(ctx, now, []sluice.Check{{Rule: roomy, Key: k}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("roomy key %s: %+v, %v; want allowed", k, out[0], err)
			}
		}
		for i := range 64 - len(allowing) {
			if err := st.Take(ctx, now, []sluice.Check{{Rule: perIP, Key: fmt.Sprint(i)}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("key %d: %+v, %v; want allowed", i, out[0], err)
			}
		}
		lim, err := sluice.NewLimiter(st, sluice.WithClock(testclock.New(now)))
		if err != nil {
			t.Fatal(err)
		}
		return st, lim
	}

	st, lim := full()
	for k := range 3 {
		res, err := lim.Take(ctx, []sluice.Check{{Rule: perIP, Key: "7"}, {Rule: perKey, Key: fmt.Sprint("fresh-", k)}}, nil)
		if err != nil || res.Allowed || res.Err != nil || res.Decisions[0].Allowed || res.Decisions[0].RetryAfter <= 0 {
			t.Fatalf("spent key beside new key %d: %+v, %v, store error %v; want denied by the spent key, not by a failure mode", k, res, err, res.Err)
		}
	}
	if s := st.Stats(); s.Keys != 64 || s.Refused != 3 {
		t.Errorf("Stats() = %+v, want the 64 keys held and 3 refusals", s)
	}

	// A held key that allows is not charged when the new key finds no
	// room: the failure mode (open) decides, charging nothing.
	st, lim = full("held")
	res, err := lim.Take(ctx, []sluice.Check{{Rule: roomy, Key: "held"}, {Rule: perKey, Key: "fresh"}}, nil)
	if err != nil || !res.Allowed || !errors.Is(res.Err, ErrFull) {
		t.Fatalf("allowing key beside new key: %+v, %v, store error %v; want allowed by the failure mode", res.Decision, err, res.Err)
	}
	out := make([]sluice.Decision, 1)
	if err := st.Take(ctx, now, costed(0, []sluice.Check{{Rule: roomy, Key: "held"}}), out); err != nil || out[0].Remaining != 9 {
		t.Fatalf("roomy key after: %+v, %v; want 9 left (charged once only)", out[0], err)
	}
}
