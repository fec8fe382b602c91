package sluice

import (
	"testing"
	"time"
)

// The token bucket, the leaky bucket (meter) and GCRA make the same
// decisions, so one set of tables runs over all three.

const ms = time.Millisecond

func TestBucketSteps(t *testing.T) {
	runTables(t, algorithmsOf(bucketKind), []stepTable{
		{
			// The demo's burst: 10 requests at t=0 against 5/s. The
			// bucket starts full, so the capacity passes and the rest waits
			// for the next token, 200ms away.
			name:  "burst of 10 at t0",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, 200*ms)),
				one(0, 1, allow(5, 3, 400*ms)),
				one(0, 1, allow(5, 2, 600*ms)),
				one(0, 1, allow(5, 1, 800*ms)),
				one(0, 1, allow(5, 0, time.Second)),
				repeat(5, step{0, 1, deny(5, 0, 200*ms, time.Second)}),
				one(100*ms, 1, deny(5, 0, 100*ms, 900*ms)),
				one(200*ms-1, 1, deny(5, 0, 1, 800*ms+1)),
				one(200*ms, 1, allow(5, 0, time.Second)),
				one(200*ms, 1, deny(5, 0, 200*ms, time.Second)),
				one(1200*ms, 0, allow(5, 5, 0)),
				one(1200*ms, 5, allow(5, 0, time.Second)),
				one(3*time.Second, 2, allow(5, 3, 400*ms)),
				one(3*time.Second, 4, deny(5, 3, 200*ms, 400*ms)),
				one(3*time.Second, 6, deny(5, 3, Never, 400*ms)),
				one(3*time.Second, -1, deny(5, 3, Never, 400*ms)),
				one(3*time.Second, 3, allow(5, 0, time.Second)),
			),
		},
		{
			// The demo's steady stream: within the rate (4/s against
			// 5/s) is never refused, and the bucket refills to the brim
			// between requests.
			name:  "steady 4/s",
			limit: PerSecond(5),
			steps: steps(
				one(0, 1, allow(5, 4, 200*ms)),
				one(250*ms, 1, allow(5, 4, 200*ms)),
				one(500*ms, 1, allow(5, 4, 200*ms)),
				one(750*ms, 1, allow(5, 4, 200*ms)),
				one(1000*ms, 1, allow(5, 4, 200*ms)),
				one(1250*ms, 1, allow(5, 4, 200*ms)),
			),
		},
		{
			// At exactly the rate, with no burst to spare, every request
			// passes on the nanosecond its token is back.
			name:  "steady at the rate, burst 1",
			limit: Limit{Rate: 5, Period: time.Second, Burst: 1},
			steps: steps(
				one(0, 1, allow(1, 0, 200*ms)),
				one(200*ms-1, 1, deny(1, 0, 1, 1)),
				one(200*ms, 1, allow(1, 0, 200*ms)),
				one(400*ms, 1, allow(1, 0, 200*ms)),
				one(600*ms, 1, allow(1, 0, 200*ms)),
				one(700*ms, 1, deny(1, 0, 100*ms, 100*ms)),
				one(800*ms, 1, allow(1, 0, 200*ms)),
			),
		},
		{
			// 5 just before a second boundary and 5 on it: a bucket has no
			// boundary, so the second five wait for tokens.
			name:  "burst on both sides of a boundary",
			limit: PerSecond(5),
			steps: steps(
				one(900*ms, 1, allow(5, 4, 200*ms)),
				one(900*ms, 1, allow(5, 3, 400*ms)),
				one(900*ms, 1, allow(5, 2, 600*ms)),
				one(900*ms, 1, allow(5, 1, 800*ms)),
				one(900*ms, 1, allow(5, 0, time.Second)),
				repeat(5, step{time.Second, 1, deny(5, 0, 100*ms, 900*ms)}),
				one(1100*ms, 1, allow(5, 0, time.Second)),
				one(1100*ms, 1, deny(5, 0, 200*ms, time.Second)),
			),
		},
		{
			// 3/s: a token comes back every 333333333.3ns. Exact ticks mean
			// the k-th is back at exactly ⌈k·10^9/3⌉ ns, never before, and
			// nothing drifts: the third is back at exactly t0+1s.
			name:  "3/s",
			limit: PerSecond(3),
			steps: steps(
				one(0, 1, allow(3, 2, 333333334)),
				one(0, 1, allow(3, 1, 666666667)),
				one(0, 1, allow(3, 0, time.Second)),
				one(0, 1, deny(3, 0, 333333334, time.Second)),
				one(333333333, 1, deny(3, 0, 1, 666666667)),
				one(333333334, 1, allow(3, 0, time.Second)),
				one(666666666, 1, deny(3, 0, 1, 666666668)),
				one(666666667, 1, allow(3, 0, time.Second)),
				one(999999999, 1, deny(3, 0, 1, 666666668)),
				one(time.Second, 1, allow(3, 0, time.Second)),
				one(time.Second, 1, deny(3, 0, 333333334, time.Second)),
				one(2*time.Second, 0, allow(3, 3, 0)),
				one(2*time.Second, 3, allow(3, 0, time.Second)),
			),
		},
		{
			// 7/min: a token every 8571428571.43ns.
			name:  "7/min",
			limit: PerMinute(7),
			steps: steps(
				one(0, 1, allow(7, 6, 8571428572)),
				one(0, 1, allow(7, 5, 17142857143)),
				one(0, 1, allow(7, 4, 25714285715)),
				one(0, 1, allow(7, 3, 34285714286)),
				one(0, 1, allow(7, 2, 42857142858)),
				one(0, 1, allow(7, 1, 51428571429)),
				one(0, 1, allow(7, 0, time.Minute)),
				one(0, 1, deny(7, 0, 8571428572, time.Minute)),
				one(8571428571, 1, deny(7, 0, 1, 51428571429)),
				one(8571428572, 1, allow(7, 0, time.Minute)),
				one(17142857142, 1, deny(7, 0, 1, 51428571430)),
				one(17142857143, 1, allow(7, 0, time.Minute)),
				one(17142857143, 1, deny(7, 0, 8571428572, time.Minute)),
				one(3*time.Minute, 0, allow(7, 7, 0)),
			),
		},
		{
			// A burst larger than the rate: 3 at once, then one a second.
			name:  "1/s burst 3",
			limit: Limit{Rate: 1, Period: time.Second, Burst: 3},
			steps: steps(
				one(0, 2, allow(3, 1, 2*time.Second)),
				one(0, 2, deny(3, 1, time.Second, 2*time.Second)),
				one(0, 1, allow(3, 0, 3*time.Second)),
				one(1500*ms, 1, allow(3, 0, 2500*ms)),
				one(2500*ms, 2, deny(3, 1, 500*ms, 1500*ms)),
				one(10*time.Second, 0, allow(3, 3, 0)),
			),
		},
		{
			// Rate 0: the burst, once, and never again.
			name:  "no refill",
			limit: Limit{Rate: 0, Period: time.Second, Burst: 2},
			steps: steps(
				one(0, 1, allow(2, 1, Never)),
				one(time.Hour, 1, allow(2, 0, Never)),
				one(24*time.Hour, 1, deny(2, 0, Never, Never)),
				one(24*time.Hour, 0, allow(2, 0, Never)),
			),
		},
		{
			// A peek at a bucket never used records the time it saw: a
			// request stamped earlier is charged as if at that time (or
			// more strictly), not given the refill in between.
			name:  "clock back after a peek",
			limit: PerSecond(1),
			steps: steps(
				one(10*time.Second, 0, allow(1, 1, 0)),
				one(9*time.Second, 1, deny(1, 0, time.Second, time.Second)),
				one(10*time.Second, 1, allow(1, 0, time.Second)),
				one(10*time.Second, 1, deny(1, 0, time.Second, time.Second)),
				one(5*time.Second, 1, deny(1, 0, 6*time.Second, 6*time.Second)),
				one(11*time.Second, 1, allow(1, 0, time.Second)),
			),
		},
	})
}

// TestBucketBeforeEpoch: the state's mark for "never used" is no time a
// limiter with one tick per nanosecond sees. Emptying a bucket at a whole
// second before 1970 (a TAT of exactly the epoch) must not make it read as
// never used, and full again.
func TestBucketBeforeEpoch(t *testing.T) {
	for _, a := range algorithmsOf(bucketKind) {
		t.Run(a.name, func(t *testing.T) {
			x := mustNew(t, a, PerSecond(1))
			epoch := time.Unix(0, 0)
			start := epoch.Add(-time.Second)
			if d := x.AllowN(start, 1); d != allow(1, 0, time.Second) {
				t.Errorf("AllowN(epoch-1s, 1) = %+v, want %+v", d, allow(1, 0, time.Second))
			}
			if d := x.AllowN(start, 1); d != deny(1, 0, time.Second, time.Second) {
				t.Errorf("AllowN(epoch-1s, 1) again = %+v, want %+v", d, deny(1, 0, time.Second, time.Second))
			}
			if d := x.AllowN(epoch, 1); d != allow(1, 0, time.Second) {
				t.Errorf("AllowN(epoch, 1) = %+v, want %+v", d, allow(1, 0, time.Second))
			}
		})
	}
}

// TestBucketHorizon pins the documented horizon of the exact tick
// arithmetic: a limiter left alone for just under 2^62/q ns is full again
// and exact. (Past 2^63/q ns the ticks wrap; see internal/algo.)
func TestBucketHorizon(t *testing.T) {
	limits := []Limit{
		PerSecond(1_000_000_000_000), // q = 1000: 53 days
		PerSecond(12347),             // q = 12347: 4.3 days
		PerMinute(7),                 // q = 7: 20 years
		{Rate: 3, Period: time.Second, Burst: 100},
	}
	for _, a := range algorithmsOf(bucketKind) {
		for _, l := range limits {
			t.Run(a.name+"/"+l.String(), func(t *testing.T) {
				x := mustNew(t, a, l)
				m := newTokenModel(l)
				idle := time.Duration(horizon(l) - 1)
				for _, s := range []struct {
					at time.Duration
					n  int64
				}{{0, l.Capacity()}, {0, 1}, {idle, 0}, {idle, l.Capacity()}, {idle, 1}, {idle + 1, 1}} {
					got, want := x.AllowN(t0.Add(s.at), s.n), m.allowN(t0.Add(s.at).UnixNano(), s.n)
					if got != want {
						t.Errorf("AllowN(t0+%v, %d) = %+v, want %+v", s.at, s.n, got, want)
					}
				}
			})
		}
	}
}
