package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/redis"
)

// TestDenyCache: a denial is answered locally until its RetryAfter, then
// Redis decides again.
func TestDenyCache(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv, redis.WithDenyCache(100))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(2)}), Key: "k"}
	take(t, s, t0, 2, c)
	if d := take(t, s, t0, 1, c)[0]; d.Allowed || d.RetryAfter != 500*time.Millisecond || d.Cached {
		t.Fatalf("denial = %+v, want Redis's", d)
	}
	calls := s.Stats().Calls
	d := take(t, s, t0.Add(100*time.Millisecond), 1, c)[0]
	if want := (sluice.Decision{Limit: 2, RetryAfter: 400 * time.Millisecond, ResetAfter: 900 * time.Millisecond, Cached: true}); d != want {
		t.Fatalf("cached = %+v, want %+v", d, want)
	}
	if st := s.Stats(); st.Calls != calls || st.CacheHits != 1 {
		t.Fatalf("stats %+v: the cached denial reached Redis", st)
	}
	if d := take(t, s, t0.Add(500*time.Millisecond), 1, c)[0]; !d.Allowed || d.Cached {
		t.Fatalf("at RetryAfter = %+v, want allowed by Redis", d)
	}
	if st := s.Stats(); st.Calls != calls+1 {
		t.Fatalf("stats %+v: the expired denial did not reach Redis", st)
	}
}

// TestDenyCacheExact runs random traces with the cache on: it never
// denies what the algorithm allows, and it reports the same RetryAfter and
// ResetAfter (Remaining may be lower: it is as of the denial).
func TestDenyCacheExact(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv, redis.WithDenyCache(1000))
	for _, alg := range sluice.Algos() {
		for li, l := range []sluice.Limit{{Rate: 3, Period: time.Second}, {Rate: 10, Period: time.Minute, Burst: 4}} {
			t.Run(fmt.Sprintf("%s/%v", alg, l), func(t *testing.T) {
				rule := prep(sluice.Rule{Name: fmt.Sprint(alg, li), Algorithm: alg, Limit: l})
				rng := rand.New(rand.NewPCG(uint64(li), uint64(alg[0])))
				ref := newRefAlg(t, rule)
				c := sluice.Check{Rule: rule, Key: "k"}
				iv := l.Period / time.Duration(l.Rate)
				now := t0
				for i := range 400 {
					now = now.Add(time.Duration(rng.Int64N(int64(iv/time.Microsecond)/2+1)) * time.Microsecond)
					n := 1 + rng.Int64N(2)
					want := ref.step(t, now, n)
					got := take(t, s, now, n, c)[0]
					if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter || got.Remaining > want.Remaining {
						t.Fatalf("step %d: Take(t0%+v, %d) = %+v, want %+v", i, now.Sub(t0), n, got, want)
					}
				}
			})
		}
	}
	if s.Stats().CacheHits == 0 {
		t.Errorf("no cache hits: %+v", s.Stats())
	}
}

// TestDenyCacheBounded floods many keys: the cache stays within its size.
// A sweep of the keys again counts the denials it holds: each is answered
// from the cache once at most, and a denial a miss caches is of a key the
// sweep has passed. (Which entries a full cache drops is arbitrary, so the
// sweep may find none: that the cache holds any is shown by the last
// denial, which nothing came after.)
func TestDenyCacheBounded(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv, redis.WithDenyCache(64))
	r := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(1)})
	for i := range 500 {
		c := sluice.Check{Rule: r, Key: fmt.Sprint(i)}
		take(t, s, t0, 1, c)
		take(t, s, t0, 1, c) // denied, cached
	}
	if d := take(t, s, t0, 1, sluice.Check{Rule: r, Key: "499"})[0]; d.Allowed || !d.Cached {
		t.Fatalf("the last key again: %+v, want its denial from the cache", d)
	}
	hits := s.Stats().CacheHits
	for i := range 500 {
		if d := take(t, s, t0, 1, sluice.Check{Rule: r, Key: fmt.Sprint(i)})[0]; d.Allowed {
			t.Fatalf("key %d: %+v, want denied", i, d)
		}
	}
	if n := s.Stats().CacheHits - hits; n > 64 {
		t.Fatalf("cache held %d denials, bound 64", n)
	}
}

// TestDenyCacheRedisTime: at Redis TIME the cache counts time on the
// store's clock.
func TestDenyCacheRedisTime(t *testing.T) {
	srv := startRedis(t)
	clk := testclock.New(t0)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithBreakerClock(clk))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}), Key: "k"}
	take(t, s, time.Time{}, 1, c)
	d := take(t, s, time.Time{}, 1, c)[0]
	if d.Allowed {
		t.Fatalf("second take = %+v", d)
	}
	calls := s.Stats().Calls
	clk.Advance(d.RetryAfter - time.Microsecond)
	if got := take(t, s, time.Time{}, 1, c)[0]; got.Allowed || got.RetryAfter != time.Microsecond || s.Stats().Calls != calls {
		t.Fatalf("just before RetryAfter: %+v, %+v: want a cached denial", got, s.Stats())
	}
	clk.Advance(time.Microsecond)
	take(t, s, time.Time{}, 1, c)
	if s.Stats().Calls != calls+1 {
		t.Fatalf("at RetryAfter the cache still answered: %+v", s.Stats())
	}
}

// TestDenyCacheSubMicrosecond: with WithCallerTime, Redis decides at the
// caller's time truncated to the µs; a denial at t0+900ns is Redis's at
// t0, so at t0+RetryAfter (as Redis counts it) the request is allowed and
// the cache must not deny it.
func TestDenyCacheSubMicrosecond(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv, redis.WithDenyCache(100))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(2)}), Key: "k"}
	at := t0.Add(900 * time.Nanosecond)
	take(t, s, at, 2, c)
	if d := take(t, s, at, 1, c)[0]; d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("denial = %+v", d)
	}
	if d := take(t, s, t0.Add(500*time.Millisecond), 1, c)[0]; !d.Allowed {
		t.Fatalf("Take(t0+500ms, 1) = %+v, want allowed (Redis decides at t0+500ms, 500ms after its denial at t0)", d)
	}
}
