package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// refAlg is one key of the reference: the single-key algorithm, dropped
// when it is back to idle as a store drops the key, and the steps since,
// to replay on a copy when a request only tries.
type refAlg struct {
	rule *sluice.PreparedRule
	a    sluice.Algorithm
	ops  []refOp
}

type refOp struct {
	t time.Time
	n int64
}

func newRefAlg(t testing.TB, r *sluice.PreparedRule) *refAlg {
	x := &refAlg{rule: r}
	x.reset(t)
	return x
}

func (x *refAlg) reset(t testing.TB) {
	a, err := x.rule.Rule().Algorithm.New(x.rule.Rule().Limit)
	if err != nil {
		t.Fatal(err)
	}
	x.a, x.ops = a, x.ops[:0]
}

// step decides at now, or at the latest time seen if now is earlier: a
// clock that goes back changes nothing (the windows do that themselves; a
// bucket whose ticks reach far enough does not).
func (x *refAlg) step(t testing.TB, now time.Time, n int64) sluice.Decision {
	if len(x.ops) > 0 && now.Before(x.ops[len(x.ops)-1].t) {
		now = x.ops[len(x.ops)-1].t
	}
	d := x.a.AllowN(now, n)
	x.ops = append(x.ops, refOp{now, n})
	if d.ResetAfter == 0 {
		x.reset(t)
	}
	return d
}

func (x *refAlg) try(t testing.TB, now time.Time, n int64) sluice.Decision {
	c, err := x.rule.Rule().Algorithm.New(x.rule.Rule().Limit)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range x.ops {
		c.AllowN(o.t, o.n)
	}
	if len(x.ops) > 0 && now.Before(x.ops[len(x.ops)-1].t) {
		now = x.ops[len(x.ops)-1].t
	}
	return c.AllowN(now, n)
}

// refStore is the reference store: single-key algorithms, all-or-nothing
// as the sluice.Store contract says: if every check not in shadow mode
// allows, every check that allows is charged; if not, none is, and a check
// that would allow reports a peek.
type refStore struct {
	t    testing.TB
	algs map[[2]string]*refAlg
}

func (s *refStore) take(now time.Time, n int64, checks []sluice.Check, out []sluice.Decision) {
	as := make([]*refAlg, len(checks))
	ok := true
	for i, c := range checks {
		k := [2]string{c.Rule.Name(), c.Key}
		if s.algs[k] == nil {
			s.algs[k] = newRefAlg(s.t, c.Rule)
		}
		as[i] = s.algs[k]
		if !c.Rule.Shadow() && !as[i].try(s.t, now, n).Allowed {
			ok = false
		}
	}
	for i := range checks {
		if ok || !as[i].try(s.t, now, n).Allowed {
			out[i] = as[i].step(s.t, now, n)
		} else {
			out[i] = as[i].step(s.t, now, 0)
		}
	}
}

// testLimits are limits for each algorithm, odd ones included: rates that
// do not divide their period, bursts above the rate, rate 0, periods of a
// day and of a few µs.
var testLimits = map[string][]sluice.Limit{
	"bucket": {
		{Rate: 3, Period: time.Second},
		{Rate: 10, Period: time.Second, Burst: 25},
		{Rate: 7, Period: 24 * time.Hour},
		{Rate: 1000, Period: 24 * time.Hour, Burst: 3},
		{Rate: 2, Period: 1500 * time.Nanosecond, Burst: 3},
		{Rate: 1000000, Period: time.Second, Burst: 5},
		{Rate: 0, Period: time.Second, Burst: 4},
		{Rate: 6, Period: 7*time.Millisecond + 3*time.Nanosecond, Burst: 2},
		{Rate: 123, Period: time.Minute, Burst: 1},
		{Rate: 1e12, Period: time.Second},
		{Rate: 104729, Period: time.Hour},
		{Rate: 26003, Period: 24 * time.Hour}, // Burst·p/h just under 2^51
	},
	"window": {
		{Rate: 3, Period: time.Second},
		{Rate: 10, Period: 100 * time.Millisecond},
		{Rate: 1000, Period: time.Hour},
		{Rate: 7, Period: 24 * time.Hour},
		{Rate: 2, Period: time.Microsecond},
		{Rate: 0, Period: time.Second},
		{Rate: 5, Period: 1500 * time.Microsecond},
		{Rate: 999983, Period: 3 * time.Second},
	},
	"bigwindow": { // beyond the sliding log's 2^20
		{Rate: 1e12, Period: 24 * time.Hour},
		{Rate: 5, Period: (1 << 45) * time.Microsecond},
		{Rate: 1 << 39, Period: 7 * time.Second},
	},
}

func limitsFor(a sluice.Algo) []sluice.Limit {
	switch a {
	case sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA:
		return testLimits["bucket"]
	}
	if a == sluice.AlgoSlidingLog {
		return testLimits["window"]
	}
	return append(testLimits["window"], testLimits["bigwindow"]...)
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// trace makes a random µs-aligned sequence of times and costs for l:
// steps around one emission interval, some long jumps, some steps back.
func trace(rng *rand.Rand, l sluice.Limit, steps int) ([]time.Time, []int64) {
	quota := max(l.Capacity(), l.Rate, 1)
	iv := max(int64(l.Period)/1000/max(l.Rate, 1), 1) // µs per unit
	pu := max(int64(l.Period)/1000, 1)
	now := t0.Add(time.Duration(rng.Int64N(pu)) * time.Microsecond)
	ts := make([]time.Time, steps)
	ns := make([]int64, steps)
	for i := range ts {
		switch r := rng.IntN(100); {
		case r < 5:
			now = now.Add(time.Duration(rng.Int64N(3*pu+1)) * time.Microsecond)
		case r < 10:
			now = now.Add(-time.Duration(rng.Int64N(2*iv+1)) * time.Microsecond)
		case r < 20:
		default:
			now = now.Add(time.Duration(rng.Int64N(iv+1)) * time.Microsecond)
		}
		ts[i] = now
		switch r := rng.IntN(100); {
		case r < 3:
			ns[i] = -1
		case r < 10:
			ns[i] = 0
		case r < 15:
			ns[i] = quota + 1
		case r < 30:
			ns[i] = 1 + rng.Int64N(quota)
		default:
			ns[i] = 1
		}
	}
	return ts, ns
}

// newCallerStore is a store that decides at the caller's time, exactly,
// with nothing cached.
func newCallerStore(t testing.TB, srv *server, opts ...redis.Option) *redis.Store {
	t.Helper()
	return newCallerStoreOn(t, srv.client(t), opts...)
}

// newCallerStoreOn is newCallerStore on client c.
func newCallerStoreOn(t testing.TB, c *goredis.Client, opts ...redis.Option) *redis.Store {
	t.Helper()
	opts = append([]redis.Option{
		redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithDenyCache(0),
		redis.WithClockSkew(time.Hour), redis.WithTimeout(5 * time.Second),
	}, opts...)
	s, err := redis.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSameDecisions holds the script to the single-key algorithms: on
// random µs traces, every field of every decision is the same.
//
// With the store's clock (clock=true: at Redis TIME, the default), each
// key has a store of its own, whose clock is then the key's latest time,
// as the algorithms' is.
func TestSameDecisions(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	for _, clock := range []bool{false, true} {
		for _, alg := range sluice.Algos() {
			for li, l := range limitsFor(alg) {
				t.Run(fmt.Sprintf("clock=%v/%s/%v", clock, alg, l), func(t *testing.T) {
					sameDecisions(t, ctx, srv, clock, alg, li, l)
				})
			}
		}
	}
}

func sameDecisions(t *testing.T, ctx context.Context, srv *server, clock bool, alg sluice.Algo, li int, l sluice.Limit) {
	{
		{
			{
				s := newCallerStore(t, srv)
				rule := prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: l})
				rng := rand.New(rand.NewPCG(uint64(li), uint64(len(alg))+uint64(alg[0])))
				seen := map[string]int{}
				defer func() {
					t.Logf("decisions: %v", seen)
					if seen["allowed"] == 0 || seen["denied"]+seen["never"] == 0 {
						t.Errorf("trace too easy: %v", seen)
					}
				}()
				for k := range 3 {
					if clock {
						s = newCallerStore(t, srv, redis.WithStoreClock())
					}
					key := fmt.Sprintf("k%d", k)
					ref := newRefAlg(t, rule)
					ts, ns := trace(rng, l, 200)
					if clock {
						// The store's clock never goes back, even for a
						// key gone idle, whose algorithm starts afresh.
						for i := 1; i < len(ts); i++ {
							if ts[i].Before(ts[i-1]) {
								ts[i] = ts[i-1]
							}
						}
					}
					checks := []sluice.Check{{Rule: rule, Key: key}}
					out := make([]sluice.Decision, 1)
					for i := range ts {
						want := ref.step(t, ts[i], ns[i])
						seen[kindOf(want)]++
						if err := s.Take(ctx, ts[i], costed(ns[i], checks), out); err != nil {
							t.Fatalf("step %d: Take(t0%+v, %d): %v", i, ts[i].Sub(t0), ns[i], err)
						}
						if out[0] != want {
							t.Fatalf("step %d: Take(t0%+v, %d) = %+v, want %+v", i, ts[i].Sub(t0), ns[i], out[0], want)
						}
					}
				}
			}
		}
	}
}

// TestAllOrNothing decides random requests of several checks, shadow ones
// among them, and compares them with the reference store.
//
// With the store's clock, no request is decided before the latest time
// the store has seen: the test holds the times it passes to that.
func TestAllOrNothing(t *testing.T) {
	srv := startRedis(t)
	for _, clock := range []bool{false, true} {
		t.Run(fmt.Sprintf("clock=%v", clock), func(t *testing.T) {
			allOrNothing(t, srv, clock)
		})
	}
}

func allOrNothing(t *testing.T, srv *server, clock bool) {
	ctx := context.Background()
	s := newCallerStore(t, srv)
	if clock {
		s = newCallerStore(t, srv, redis.WithStoreClock())
	}
	latest := t0
	rng := rand.New(rand.NewPCG(7, 11))
	var rules []*sluice.PreparedRule
	for i, alg := range sluice.Algos() {
		for j, l := range []sluice.Limit{{Rate: 5, Period: time.Second}, {Rate: 3, Period: 100 * time.Millisecond, Burst: 4}} {
			rules = append(rules, prep(sluice.Rule{Name: fmt.Sprintf("r%d.%d", i, j), Algorithm: alg, Limit: l, Shadow: rng.IntN(4) == 0}))
		}
	}
	ref := &refStore{t: t, algs: map[[2]string]*refAlg{}}
	now := t0
	for i := range 1500 {
		now = now.Add(time.Duration(rng.Int64N(40_000)) * time.Microsecond)
		if rng.IntN(20) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(20_000)) * time.Microsecond)
		}
		if clock && now.Before(latest) {
			now = latest
		}
		latest = now
		k := 1 + rng.IntN(3)
		perm := rng.Perm(len(rules))[:k]
		checks := make([]sluice.Check, k)
		for j, p := range perm {
			checks[j] = sluice.Check{Rule: rules[p], Key: fmt.Sprintf("u%d", rng.IntN(2))}
		}
		n := int64(rng.IntN(3))
		got := make([]sluice.Decision, k)
		want := make([]sluice.Decision, k)
		ref.take(now, n, checks, want)
		if err := s.Take(ctx, now, costed(n, checks), got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		for j := range checks {
			if got[j] != want[j] {
				t.Fatalf("request %d (n=%d, t0%+v), check %d %s shadow=%v: got %+v, want %+v",
					i, n, now.Sub(t0), j, checks[j].Rule.Name(), checks[j].Rule.Shadow(), got[j], want[j])
			}
		}
	}
}

// kindOf sorts decisions, to see that a trace tried every case.
func kindOf(d sluice.Decision) string {
	switch {
	case d.Allowed:
		return "allowed"
	case d.RetryAfter == sluice.Never:
		return "never"
	case d.RetryAfter%time.Microsecond != 0:
		return "denied-ns"
	}
	return "denied"
}
