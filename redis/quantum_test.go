package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
)

// TestCoarseBucketsAsMemory holds the one difference between the stores:
// a bucket the script decides in quanta of 1ms or 1s (its refill too long
// for its doubles in units of a µs) decides each request as the memory
// store decides it at the start of the request's quantum: the same
// Allowed, Limit and Remaining, and waits that end at the first whole
// quantum at or after the memory store's. The two differ by less than a
// quantum.
func TestCoarseBucketsAsMemory(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	limits := []sluice.Limit{
		{Rate: 30011, Period: 24 * time.Hour},
		{Rate: 99991, Period: 24 * time.Hour},
		{Rate: 1000003, Period: 365 * 24 * time.Hour},
		{Rate: 1, Period: 24 * time.Hour, Burst: 1e6},
	}
	for _, l := range limits {
		for _, a := range []sluice.Algo{sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA} {
			t.Run(fmt.Sprintf("%s/%v", a, l), func(t *testing.T) {
				r := prep(sluice.Rule{Name: "coarse", Algorithm: a, Limit: l})
				rs := newCallerStoreOn(t, rc)
				q, err := rs.Resolution(r)
				if err != nil || q <= time.Microsecond {
					t.Fatalf("Resolution(%v) = %v, %v; want a quantum coarser than a µs", l, q, err)
				}
				ms, err := memory.New()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ms.Close() })
				checks := []sluice.Check{{Rule: r, Key: "k"}}
				quota := r.Quota()
				emit := l.Period / time.Duration(l.Rate)
				rnd := rand.New(rand.NewPCG(uint64(l.Rate), 7))
				t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
				now := t0
				mem := make([]sluice.Decision, 1)
				for i := range 300 {
					var d time.Duration
					switch rnd.IntN(5) {
					case 0: // within the quantum, or the next
						d = time.Duration(rnd.Int64N(int64(q)))
					case 1, 2: // around a unit's refill
						d = time.Duration(rnd.Int64N(3 * int64(emit)))
					case 3:
						d = time.Duration(rnd.Int64N(int64(l.Period)))
					}
					now = now.Add(d.Truncate(time.Microsecond))
					n := rnd.Int64N(3)
					if i == 0 || rnd.IntN(10) == 0 {
						n = quota - rnd.Int64N(2)
					}
					got := take(t, rs, now, n, checks...)[0]
					start := startOf(now, q)
					if err := ms.Take(context.Background(), start, costed(n, checks), mem); err != nil {
						t.Fatal(err)
					}
					want := mem[0]
					want.RetryAfter = endAt(start, want.RetryAfter, now, q)
					want.ResetAfter = endAt(start, want.ResetAfter, now, q)
					if got != want {
						t.Fatalf("step %d: Take(t0+%v, %d) = %+v; want %+v, the memory store's at the start of the %v (t0+%v): %+v",
							i, now.Sub(t0), n, got, want, q, start.Sub(t0), mem[0])
					}
				}
			})
		}
	}
}

// startOf is the start of the quantum q holding t.
func startOf(t time.Time, q time.Duration) time.Time {
	ns := t.UnixNano()
	return time.Unix(0, ns-ns%int64(q)).UTC()
}

// endAt is a wait of d from start, ended at the first whole quantum q at
// or after it, as a wait from now.
func endAt(start time.Time, d time.Duration, now time.Time, q time.Duration) time.Duration {
	if d == 0 || d == sluice.Never {
		return d
	}
	end := start.Add(d)
	if ns := end.UnixNano() % int64(q); ns != 0 {
		end = end.Add(q - time.Duration(ns))
	}
	return end.Sub(now)
}

// TestCoarseBucketTTL holds a coarse bucket's key for as long as its state
// counts to a caller as far behind Redis's clock as WithClockSkew allows:
// the state drains at the end of a quantum, up to a quantum after its
// exact drain time, and the key must outlive that and the skew.
func TestCoarseBucketTTL(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	const skew = 5 * time.Second
	p := prefix(t)
	s := newCallerStoreOn(t, rc, redis.WithPrefix(p), redis.WithClockSkew(skew))
	// a full bucket's drain is not a whole number of seconds
	r := prep(sluice.Rule{Name: "coarse", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1000003, Period: 365 * 24 * time.Hour, Burst: 1000002}})
	if q, err := s.Resolution(r); err != nil || q != time.Second {
		t.Fatalf("Resolution = %v, %v; want 1s", q, err)
	}
	now := time.Now().Truncate(time.Second).Add(time.Millisecond) // early in its quantum
	d := take(t, s, now, r.Quota(), sluice.Check{Rule: r, Key: "k"})[0]
	if !d.Allowed {
		t.Fatalf("the first take of a full bucket = %+v", d)
	}
	keys := stateKeys(scanKeys(t, rc, p))
	if len(keys) != 1 {
		t.Fatalf("keys %v, want 1", keys)
	}
	ttl, err := rc.PTTL(context.Background(), keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if least := d.ResetAfter + skew - time.Since(now); ttl < least {
		t.Fatalf("PTTL %v, want at least ResetAfter %v and the skew (%v): the key expires while a caller %v behind still reads the state as in debt", ttl, d.ResetAfter, least, skew)
	}
}
