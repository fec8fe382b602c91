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
