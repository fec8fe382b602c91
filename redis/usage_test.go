package redis_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// usageCharges are the charges that record usage after the fact.
var usageCharges = []sluice.Charge{sluice.ChargeUsage, sluice.ChargeCount}

// TestUsageLLM is an LLM gateway's token budget: a check of cost 0 when a
// request arrives, the tokens its answer used (150) charged when it ends,
// twenty times on 100 an hour. The first check passes; the charge, more
// than the budget, is denied and recorded all the same, so every check
// after it is denied, on every algorithm, at Redis TIME through the
// batcher and the denial cache as a service runs it, and at the caller's
// time.
func TestUsageLLM(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	stores := map[string]func(t *testing.T) *redis.Store{
		"redis-time": func(t *testing.T) *redis.Store { return newStore(t, rc, redis.WithPrefix(prefix(t))) },
		"caller":     func(t *testing.T) *redis.Store { return newCallerStore(t, srv) },
	}
	for name, mk := range stores {
		for _, charge := range usageCharges {
			for _, alg := range sluice.Algos() {
				t.Run(fmt.Sprintf("%s/%v/%s", name, charge, alg), func(t *testing.T) {
					s := mk(t)
					c := sluice.Check{Rule: &sluice.Rule{Name: "tokens", Algorithm: alg, Limit: sluice.PerHour(100), Charge: charge}, Key: "key-1"}
					now := t0
					for i := range 20 {
						check := take(t, s, now, 0, c)[0]
						if check.Allowed != (i == 0) {
							t.Fatalf("round %d: check 0 = %+v, want allowed only before the first charge", i, check)
						}
						now = now.Add(time.Second)
						charged := take(t, s, now, 150, c)[0]
						if charged.Allowed || charged.RetryAfter != sluice.Never || charged.Remaining != 0 {
							t.Fatalf("round %d: charge 150 = %+v, want denied, Never, nothing left", i, charged)
						}
						now = now.Add(time.Second)
					}
				})
			}
		}
	}
}

// TestUsageCap: a charge of MaxInt64 is recorded up to the cap, a
// period's worth of debt: a bucket is usable again after two refills, a
// window after two periods, and meanwhile a bucket's key lives as long as
// its debt.
func TestUsageCap(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	for _, alg := range sluice.Algos() {
		t.Run(string(alg), func(t *testing.T) {
			p := prefix(t)
			s := newCallerStore(t, srv, redis.WithPrefix(p), redis.WithTTLSlack(0))
			l := sluice.Limit{Rate: 10, Period: time.Hour}
			c := sluice.Check{Rule: &sluice.Rule{Name: "r", Algorithm: alg, Limit: l, Charge: sluice.ChargeUsage}, Key: "k"}
			now := time.Now().Truncate(time.Hour) // at a window's start
			d := take(t, s, now, math.MaxInt64, c)[0]
			if d.Allowed || d.RetryAfter != sluice.Never || d.Remaining != 0 || d.ResetAfter <= 0 || d.ResetAfter > 2*l.Period {
				t.Fatalf("charge MaxInt64 = %+v, want denied, Never, 0 left, reset within two periods", d)
			}
			if alg == sluice.AlgoTokenBucket || alg == sluice.AlgoLeakyBucket || alg == sluice.AlgoGCRA {
				if d.ResetAfter != 2*l.Period {
					t.Fatalf("bucket charged MaxInt64: ResetAfter %v, want two refills, %v", d.ResetAfter, 2*l.Period)
				}
				keys := stateKeys(scanKeys(t, rc, p))
				if len(keys) != 1 {
					t.Fatalf("keys %v, want 1", keys)
				}
				ttl, err := rc.PTTL(context.Background(), keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl < d.ResetAfter-time.Minute {
					t.Fatalf("PTTL of a bucket in debt %v, want at least its ResetAfter %v", ttl, d.ResetAfter)
				}
			}
			// twice more: the cap holds
			for range 2 {
				if d2 := take(t, s, now, math.MaxInt64, c)[0]; d2 != d {
					t.Fatalf("charged MaxInt64 again = %+v, want %+v: the debt is capped", d2, d)
				}
			}
			if d := take(t, s, now.Add(2*l.Period), 0, c)[0]; !d.Allowed || d.Remaining != l.Rate {
				t.Fatalf("two periods later: %+v, want allowed, the whole quota left", d)
			}
		})
	}
}

// TestUsageDenyCache: a usage charge always reaches Redis and is recorded,
// even while the denial cache holds a denial for the same cost; a check of
// cost 0 of a usage rule is answered from its own cached denial; and a
// denial cached under one charge answers no check of another.
func TestUsageDenyCache(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv, redis.WithDenyCache(100))
	l := sluice.PerSecond(2)
	rule := func(c sluice.Charge) sluice.Check {
		return sluice.Check{Rule: &sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: l, Charge: c}, Key: "k"}
	}
	usage, count, gate := rule(sluice.ChargeUsage), rule(sluice.ChargeCount), rule(sluice.ChargeGate)
	steps := []struct {
		at    time.Duration
		c     sluice.Check
		n     int64
		want  sluice.Decision
		cache bool // answered from the cache
	}{
		{0, usage, 2, sluice.Decision{Allowed: true, Limit: 2, ResetAfter: time.Second}, false},
		// a unit over: recorded, a debt of 3 units, 1s until one more fits
		{0, usage, 1, sluice.Decision{Limit: 2, RetryAfter: time.Second, ResetAfter: 1500 * time.Millisecond}, false},
		// the same charge again: recorded, up to the cap of 4 units
		{0, usage, 1, sluice.Decision{Limit: 2, RetryAfter: 1500 * time.Millisecond, ResetAfter: 2 * time.Second}, false},
		{0, usage, 1, sluice.Decision{Limit: 2, RetryAfter: 1500 * time.Millisecond, ResetAfter: 2 * time.Second}, false},
		// a check of cost 0 waits for a unit, then from the cache
		{100 * time.Millisecond, usage, 0, sluice.Decision{Limit: 2, RetryAfter: 1400 * time.Millisecond, ResetAfter: 1900 * time.Millisecond}, false},
		{200 * time.Millisecond, usage, 0, sluice.Decision{Limit: 2, RetryAfter: 1300 * time.Millisecond, ResetAfter: 1800 * time.Millisecond}, true},
		// count's cost 0 waits only for the debt past the bucket
		{200 * time.Millisecond, count, 0, sluice.Decision{Limit: 2, RetryAfter: 800 * time.Millisecond, ResetAfter: 1800 * time.Millisecond}, false},
		// a gate rule's peek is allowed
		{200 * time.Millisecond, gate, 0, sluice.Decision{Allowed: true, Limit: 2, ResetAfter: 1800 * time.Millisecond}, false},
		// a unit fits once three have drained
		{1500 * time.Millisecond, usage, 0, sluice.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * time.Millisecond}, false},
	}
	for i, st := range steps {
		before := s.Stats()
		d := take(t, s, t0.Add(st.at), st.n, st.c)[0]
		if d != st.want {
			t.Fatalf("step %d: Take(t0+%v, %d) %v = %+v, want %+v", i, st.at, st.n, st.c.Rule.Charge, d, st.want)
		}
		after := s.Stats()
		if hit := after.CacheHits > before.CacheHits; hit != st.cache || hit == (after.Calls > before.Calls) {
			t.Fatalf("step %d: %+v then %+v: want answered from the cache %v, else by Redis", i, before, after, st.cache)
		}
	}
}

// TestUsageClusterSplit: on a 3-master Cluster, a request with a usage
// check on one master and a gate check on another is decided in parts. A
// gate check that denies leaves the usage recorded, which no give-back
// takes off; a usage check that denies has the gate check's part given
// back.
func TestUsageClusterSplit(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	ipKey, userKey := keysOn(t, cc, false)
	s := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0))
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			tokens := &sluice.Rule{Name: "tokens:" + string(a), Algorithm: a, Limit: sluice.Limit{Rate: 10, Period: 1000 * time.Hour}, Charge: sluice.ChargeUsage}
			user := &sluice.Rule{Name: "user:" + string(a), Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}
			two := []sluice.Check{{Rule: tokens, Key: ipKey, Cost: 4}, {Rule: user, Key: userKey, Cost: 1}}
			before := s.Stats()
			out := take(t, s, time.Time{}, 0, two...)
			if !out[0].Allowed || !out[1].Allowed || out[0].Remaining != 6 || out[1].Remaining != 0 {
				t.Fatalf("first: %+v, want both allowed, 6 tokens and no request left", out)
			}
			// the user denies: the tokens are recorded all the same
			out = take(t, s, time.Time{}, 0, two...)
			if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 2 {
				t.Fatalf("user exhausted: %+v, want the tokens allowed and recorded, 2 left", out)
			}
			if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: tokens, Key: ipKey})[0]; d.Remaining != 2 {
				t.Fatalf("tokens after the denied request: %+v, want 2 left: the usage was given back", d)
			}
			// the tokens deny: the user's part is given back
			user2 := &sluice.Rule{Name: "user2:" + string(a), Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(3)}
			out = take(t, s, time.Time{}, 0, two[0], sluice.Check{Rule: user2, Key: userKey, Cost: 1})
			if out[0].Allowed || !out[1].Allowed || out[0].Remaining != 0 || out[1].Remaining != 3 {
				t.Fatalf("tokens over: %+v, want the tokens denied and the user's peek, 3 left", out)
			}
			if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: user2, Key: userKey})[0]; d.Remaining != 3 {
				t.Fatalf("user after the denied request: %+v, want 3 left", d)
			}
			after := s.Stats()
			if after.Splits-before.Splits != 3 || after.GiveBacks-before.GiveBacks != 1 || after.GiveBackErrors != 0 {
				t.Fatalf("stats %+v then %+v: want 3 requests in parts, 1 given back", before, after)
			}
		})
	}
}
