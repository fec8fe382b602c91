package redis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
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
					c := sluice.Check{Rule: prep(sluice.Rule{Name: "tokens", Algorithm: alg, Limit: sluice.PerHour(100), Charge: charge}), Key: "key-1"}
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
			s := newCallerStore(t, srv, redis.WithPrefix(p), redis.WithClockSkew(time.Second)) // the default slack: its TTLs are observed
			l := sluice.Limit{Rate: 10, Period: time.Hour}
			c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: l, Charge: sluice.ChargeUsage}), Key: "k"}
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
		return sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: l, Charge: c}), Key: "k"}
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
		want := st.want
		want.Cached = st.cache // the cache marks what it answers
		if d != want {
			t.Fatalf("step %d: Take(t0+%v, %d) %v = %+v, want %+v", i, st.at, st.n, st.c.Rule.Rule().Charge, d, want)
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
// back. On one master (different slots), the same in one run.
func TestUsageClusterSplit(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	for _, same := range []bool{false, true} {
		ipKey, userKey := keysOn(t, cc, same)
		s := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0))
		for _, a := range sluice.Algos() {
			t.Run(fmt.Sprintf("%s/same-master=%v", a, same), func(t *testing.T) {
				usageClusterSplit(t, s, a, same, ipKey, userKey)
			})
		}
	}
}

func usageClusterSplit(t *testing.T, s *redis.Store, a sluice.Algo, same bool, ipKey, userKey string) {
	tokens := prep(sluice.Rule{Name: "tokens:" + string(a), Algorithm: a, Limit: sluice.Limit{Rate: 10, Period: 1000 * time.Hour}, Charge: sluice.ChargeUsage})
	user := prep(sluice.Rule{Name: "user:" + string(a), Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)})
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
	user2 := prep(sluice.Rule{Name: "user2:" + string(a), Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(3)})
	out = take(t, s, time.Time{}, 0, two[0], sluice.Check{Rule: user2, Key: userKey, Cost: 1})
	if out[0].Allowed || !out[1].Allowed || out[0].Remaining != 0 || out[1].Remaining != 3 {
		t.Fatalf("tokens over: %+v, want the tokens denied and the user's peek, 3 left", out)
	}
	if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: user2, Key: userKey})[0]; d.Remaining != 3 {
		t.Fatalf("user after the denied request: %+v, want 3 left", d)
	}
	after := s.Stats()
	splits, backs := int64(3), int64(1)
	if same {
		splits, backs = 0, 0
	}
	if after.Splits-before.Splits != splits || after.GiveBacks-before.GiveBacks != backs || after.GiveBackErrors != 0 {
		t.Fatalf("stats %+v then %+v: want %d requests in parts, %d given back", before, after, splits, backs)
	}
}

// algoRef is one key of a rule as internal/algo decides it, the
// arithmetic the memory store runs: the reference for the script's usage
// and count charges, which the single-key algorithms do not have. Like
// refAlg, it reads a time before the latest it has seen as that time, and
// starts afresh when its state is back to idle, as a store drops the key;
// it keeps the steps since, to try a request on a copy.
type algoRef struct {
	sp   *algo.Spec
	tat  algo.TAT  // the bucket's arithmetic at the store's resolution
	kind algo.Kind // the bucket's kind at it
	x    uint64    // KindBucket
	wide algo.Wide
	fix  algo.FixedState
	ctr  algo.CounterState
	log  algo.LogState
	ops  []refOp
}

func newAlgoRef(t testing.TB, r *sluice.PreparedRule) *algoRef {
	sp := algo.Of(r)
	if sp == nil {
		t.Fatal("the rule is not prepared")
	}
	x := &algoRef{sp: sp, tat: sp.TAT, kind: sp.Kind}
	// The script decides a bucket too long for its doubles at a coarser
	// resolution than the algorithm's own.
	if res := redis.Resolution(r); res > sp.TAT.Resolution() {
		var ok bool
		if x.tat, x.kind, ok = sp.BucketAt(res); !ok {
			t.Fatalf("%v at %v: the store holds it, the algorithm does not", sp.Key, res)
		}
	}
	x.reset()
	return x
}

func (x *algoRef) reset() {
	x.x, x.wide, x.fix, x.ctr, x.ops = 0, algo.Wide{}, algo.FixedState{}, algo.CounterState{}, x.ops[:0]
	if x.sp.Kind == algo.KindLog {
		x.log = x.sp.Log.NewState()
	}
}

func (x *algoRef) decide(now time.Time, n int64) sluice.Decision {
	at := now.UnixNano()
	var d algo.Decision
	switch sp := x.sp; x.kind {
	case algo.KindBucket:
		d, x.x = x.tat.Step(x.x, at, n)
	case algo.KindWide:
		rel := x.tat.Enter(&x.wide, at)
		d, x.wide.X = x.tat.Step(x.wide.X, rel, n)
	case algo.KindFixed:
		d = sp.Window.Fixed(&x.fix, at, n)
	case algo.KindCounter:
		d = sp.Window.Counter(&x.ctr, at, n)
	case algo.KindLog:
		d = sp.Log.Step(&x.log, at, n)
	}
	return sluice.Decision(d)
}

func (x *algoRef) step(now time.Time, n int64) sluice.Decision {
	if len(x.ops) > 0 && now.Before(x.ops[len(x.ops)-1].t) {
		now = x.ops[len(x.ops)-1].t
	}
	d := x.decide(now, n)
	x.ops = append(x.ops, refOp{now, n})
	if d.ResetAfter == 0 {
		x.reset()
	}
	return d
}

func (x *algoRef) try(t testing.TB, now time.Time, n int64) sluice.Decision {
	c := &algoRef{sp: x.sp, tat: x.tat, kind: x.kind}
	c.reset()
	for _, o := range x.ops {
		c.decide(o.t, o.n)
	}
	if len(x.ops) > 0 && now.Before(x.ops[len(x.ops)-1].t) {
		now = x.ops[len(x.ops)-1].t
	}
	return c.decide(now, n)
}

// usageCost makes some of a trace's costs those usage meets: twice the
// quota and more, up to MaxInt64.
func usageCost(rng *rand.Rand, quota, n int64) int64 {
	switch rng.IntN(20) {
	case 0:
		return math.MaxInt64
	case 1:
		return 2*quota + rng.Int64N(3)
	case 2, 3:
		return quota + 1 + rng.Int64N(quota+1)
	}
	return n
}

// TestUsageSameDecisions holds the script's usage and count charges to
// internal/algo's arithmetic: on random µs traces of costs from negative
// to MaxInt64, every field of every decision is the same, for every
// algorithm and the limits of TestSameDecisions, at the caller's time and
// under the store's clock.
func TestUsageSameDecisions(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	for _, clock := range []bool{false, true} {
		for _, charge := range usageCharges {
			for _, alg := range sluice.Algos() {
				for li, l := range limitsFor(alg) {
					t.Run(fmt.Sprintf("clock=%v/%v/%s/%v", clock, charge, alg, l), func(t *testing.T) {
						usageSameDecisions(t, ctx, srv, clock, charge, alg, li, l)
					})
				}
			}
		}
	}
}

func usageSameDecisions(t *testing.T, ctx context.Context, srv *server, clock bool, charge sluice.Charge, alg sluice.Algo, li int, l sluice.Limit) {
	s := newCallerStore(t, srv)
	rule := prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: l, Charge: charge})
	rng := rand.New(rand.NewPCG(uint64(li), uint64(charge)<<8+uint64(alg[0])))
	quota := max(l.Capacity(), l.Rate, 1)
	seen := map[string]int{}
	defer func() {
		t.Logf("decisions: %v", seen)
		// a window of Rate 0 allows nothing but count's cost 0
		if seen["allowed"] == 0 && l.Rate > 0 || seen["denied"]+seen["never"] == 0 {
			t.Errorf("trace too easy: %v", seen)
		}
	}()
	for k := range 3 {
		if clock {
			s = newCallerStore(t, srv, redis.WithStoreClock())
		}
		key := fmt.Sprintf("k%d", k)
		ref := newAlgoRef(t, rule)
		ts, ns := trace(rng, l, 200)
		for i := range ns {
			ns[i] = usageCost(rng, quota, ns[i])
		}
		if clock {
			for i := 1; i < len(ts); i++ {
				if ts[i].Before(ts[i-1]) {
					ts[i] = ts[i-1]
				}
			}
		}
		checks := []sluice.Check{{Rule: rule, Key: key}}
		out := make([]sluice.Decision, 1)
		for i := range ts {
			want := ref.step(ts[i], ns[i])
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

// TestUsageMixed decides random requests of several checks, gate, usage
// and count rules of every algorithm, shadow ones among them, against a
// reference store on internal/algo: a request is allowed iff every check
// not in shadow mode allows; usage and count checks are recorded whatever
// the request's fate; gate checks are charged only when it is allowed.
func TestUsageMixed(t *testing.T) {
	srv := startRedis(t)
	for _, clock := range []bool{false, true} {
		t.Run(fmt.Sprintf("clock=%v", clock), func(t *testing.T) {
			usageMixed(t, srv, clock)
		})
	}
}

func usageMixed(t *testing.T, srv *server, clock bool) {
	ctx := context.Background()
	s := newCallerStore(t, srv)
	if clock {
		s = newCallerStore(t, srv, redis.WithStoreClock())
	}
	rng := rand.New(rand.NewPCG(13, 17))
	var rules []*sluice.PreparedRule
	for i, alg := range sluice.Algos() {
		for j, l := range []sluice.Limit{{Rate: 5, Period: time.Second}, {Rate: 3, Period: 100 * time.Millisecond, Burst: 4}} {
			for c := range sluice.ChargeCount + 1 {
				rules = append(rules, prep(sluice.Rule{Name: fmt.Sprintf("r%d.%d.%v", i, j, c), Algorithm: alg, Limit: l, Charge: c, Shadow: rng.IntN(4) == 0}))
			}
		}
	}
	refs := map[[2]string]*algoRef{}
	seen := map[string]int{}
	now := t0
	for i := range 1500 {
		now = now.Add(time.Duration(rng.Int64N(40_000)) * time.Microsecond)
		if !clock && rng.IntN(20) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(20_000)) * time.Microsecond)
		}
		k := 1 + rng.IntN(3)
		checks := make([]sluice.Check, k)
		as := make([]*algoRef, k)
		for j, p := range rng.Perm(len(rules))[:k] {
			checks[j] = sluice.Check{Rule: rules[p], Key: fmt.Sprintf("u%d", rng.IntN(2))}
			if rng.IntN(3) == 0 {
				checks[j].Cost = 1 + rng.Int64N(12)
			}
			key := [2]string{checks[j].Rule.Name(), checks[j].Key}
			if refs[key] == nil {
				refs[key] = newAlgoRef(t, checks[j].Rule)
			}
			as[j] = refs[key]
		}
		n := int64(rng.IntN(3))
		checks = costed(n, checks)
		ok := true
		for j, c := range checks {
			if !c.Rule.Shadow() && !as[j].try(t, now, c.Units()).Allowed {
				ok = false
			}
		}
		want := make([]sluice.Decision, k)
		for j, c := range checks {
			cost := c.Units()
			if c.Rule.Rule().Charge == sluice.ChargeGate && !ok && as[j].try(t, now, cost).Allowed {
				cost = 0 // not charged: its peek
			}
			want[j] = as[j].step(now, cost)
		}
		got := make([]sluice.Decision, k)
		if err := s.Take(ctx, now, checks, got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		seen[fmt.Sprint("allowed=", ok)]++
		for j := range checks {
			if got[j] != want[j] {
				t.Fatalf("request %d (n=%d, t0%+v), check %d %s shadow=%v cost %d: got %+v, want %+v",
					i, n, now.Sub(t0), j, checks[j].Rule.Name(), checks[j].Rule.Shadow(), checks[j].Units(), got[j], want[j])
			}
		}
	}
	t.Logf("requests: %v", seen)
}

// TestUsageLogMerge: a sliding log that holds Rate entries in its window
// records usage that does not fit into its newest entry, moved to the
// time of the charge, as the memory store's ring of Rate cells does, up
// to its cap; the log is held to the memory store's by the decisions of
// requests after the steps (see sameFutures).
func TestUsageLogMerge(t *testing.T) {
	_, _, s, c, at := callerLog(t)
	c.Rule = prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerSecond(3), Charge: sluice.ChargeUsage})
	for i := range 3 {
		if d := take(t, s, at.Add(time.Duration(i)*time.Millisecond), 1, c)[0]; !d.Allowed {
			t.Fatalf("unit %d: %+v, want allowed", i, d)
		}
	}
	d := take(t, s, at.Add(3*time.Millisecond), 2, c)[0]
	if want := (sluice.Decision{Limit: 3, RetryAfter: time.Second, ResetAfter: time.Second}); d != want {
		t.Fatalf("2 over 3 entries = %+v, want %+v", d, want)
	}
	steps := []logStep{{0, 1}, {time.Millisecond, 1}, {2 * time.Millisecond, 1}, {3 * time.Millisecond, 2}}
	around := []time.Duration{999 * time.Millisecond, time.Second, time.Second + time.Microsecond, 1001 * time.Millisecond,
		1002 * time.Millisecond, 1003 * time.Millisecond, 1003*time.Millisecond + time.Microsecond, 1004 * time.Millisecond, 1004*time.Millisecond + time.Microsecond, 2 * time.Second}
	sameFutures(t, s, c.Rule, at, steps, around)
	// the cap: 6 units live, one more records nothing
	d = take(t, s, at.Add(4*time.Millisecond), 5, c)[0]
	if want := (sluice.Decision{Limit: 3, RetryAfter: sluice.Never, ResetAfter: time.Second}); d != want {
		t.Fatalf("5 more = %+v, want %+v", d, want)
	}
	steps = append(steps, logStep{4 * time.Millisecond, 5})
	sameFutures(t, s, c.Rule, at, steps, around)
	if d := take(t, s, at.Add(4*time.Millisecond), 1, c)[0]; d.ResetAfter != time.Second || d.RetryAfter != time.Second {
		t.Fatalf("one more at the cap = %+v, want a wait of a second", d)
	}
	steps = append(steps, logStep{4 * time.Millisecond, 1})
	sameFutures(t, s, c.Rule, at, steps, around)
}

// TestUsagePair: envoyproxy/ratelimit's per-second Redis beside the main
// one, with a per-second usage limit and an hourly gate limit: a request
// on both is decided in a part on each. The hourly limit's denial leaves
// the per-second usage recorded; the usage's denial has the hourly
// charge given back.
func TestUsagePair(t *testing.T) {
	mainSrv, secondSrv := startRedis(t), startRedis(t)
	p := prefix(t)
	pair, err := redis.NewPair(newCallerStore(t, mainSrv, redis.WithPrefix(p)), newCallerStore(t, secondSrv, redis.WithPrefix(p)), redis.ToSecondStore)
	if err != nil {
		t.Fatal(err)
	}
	hourly := prep(sluice.Rule{Name: "hourly", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 2, Period: time.Hour}})
	bytes := prep(sluice.Rule{Name: "bytes", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100), Charge: sluice.ChargeCount})
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	take := func(checks ...sluice.Check) []sluice.Decision {
		t.Helper()
		out := make([]sluice.Decision, len(checks))
		if err := pair.Take(context.Background(), at, costed(0, checks), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	both := func(b int64) []sluice.Check {
		return []sluice.Check{{Rule: hourly, Key: "u", Cost: 1}, {Rule: bytes, Key: "u", Cost: b}}
	}
	if d := take(both(30)...); !d[0].Allowed || !d[1].Allowed || d[0].Remaining != 1 || d[1].Remaining != 70 {
		t.Fatalf("first: %+v", d)
	}
	// the usage goes over: recorded, and the hourly charge given back
	if d := take(both(90)...); !d[0].Allowed || d[1].Allowed || d[0].Remaining != 1 || d[1].Remaining != 0 {
		t.Fatalf("bytes over: %+v, want the hourly peek, 1 left, and the bytes denied", d)
	}
	if d := take(sluice.Check{Rule: bytes, Key: "u"})[0]; d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("bytes in debt, cost 0 = %+v, want denied until the next second", d)
	}
	at = at.Add(time.Second)
	take(both(10)...)
	// the hourly limit denies: the bytes are recorded all the same
	if d := take(both(20)...); d[0].Allowed || !d[1].Allowed || d[1].Remaining != 70 {
		t.Fatalf("hourly exhausted: %+v, want the hourly denied and the bytes recorded, 70 left", d)
	}
	if d := take(sluice.Check{Rule: bytes, Key: "u"})[0]; d.Remaining != 70 {
		t.Fatalf("bytes after the denied request: %+v, want 70 left", d)
	}
}

// TestUsageConcurrent: 48 goroutines send 10 requests each at Redis TIME,
// batched into runs: 3 units of usage on a budget of 1000 a day and one
// request on a gate limit of 300 a day. Exactly 300 are allowed, and the
// budget has recorded every request's usage, 1440 units, whatever was
// allowed: its debt drains in 1440 units' time.
func TestUsageConcurrent(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithDenyCache(0), redis.WithTimeout(5*time.Second))
	budget := prep(sluice.Rule{Name: "budget", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1000), Charge: sluice.ChargeUsage})
	narrow := prep(sluice.Rule{Name: "narrow", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(300)})
	checks := []sluice.Check{{Rule: budget, Key: "k", Cost: 3}, {Rule: narrow, Key: "k"}}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			out := make([]sluice.Decision, 2)
			for range 10 {
				if err := s.Take(context.Background(), time.Time{}, checks, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed && out[1].Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 300 || denied.Load() != 180 {
		t.Fatalf("%d allowed, %d denied; want 300 and 180", allowed.Load(), denied.Load())
	}
	unit := 24 * time.Hour / 1000
	d := take(t, s, time.Time{}, 0, sluice.Check{Rule: budget, Key: "k"})[0]
	if d.Allowed || d.ResetAfter > 1440*unit || d.ResetAfter < 1440*unit-time.Minute {
		t.Fatalf("budget after = %+v, want denied, a debt of 1440 units (%v)", d, 1440*unit)
	}
	if d := take(t, s, time.Time{}, 0, checks[1])[0]; d.Remaining != 0 || d.ResetAfter < 300*unit-time.Minute {
		t.Fatalf("narrow after = %+v, want 300 charged", d)
	}
	if st := s.Stats(); st.Runs >= st.Calls {
		t.Errorf("no batching: %d runs for %d requests", st.Runs, st.Calls)
	}
}

// TestUsageTransitions replays one table of usage steps on every
// algorithm, charge and store path (a key of its own for each) and holds
// each decision to internal/algo's: recording past the limit, cost-0
// checks in debt and out, the cap, a refused negative cost, costs past
// the capacity and the debt draining over two periods.
func TestUsageTransitions(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	l := sluice.Limit{Rate: 4, Period: time.Second}
	steps := []struct {
		at time.Duration
		n  int64
	}{
		{0, 0}, {0, 3}, {0, 2}, {0, 0}, {100 * time.Millisecond, 1}, {250 * time.Millisecond, 0},
		{300 * time.Millisecond, -1}, {300 * time.Millisecond, 5}, {400 * time.Millisecond, math.MaxInt64},
		{400 * time.Millisecond, 0}, {time.Second, 0}, {1250 * time.Millisecond, 1}, {1700 * time.Millisecond, 0},
		{2 * time.Second, 2}, {2500 * time.Millisecond, 0}, {3 * time.Second, 4}, {5 * time.Second, 0},
	}
	for _, clock := range []bool{false, true} {
		for _, charge := range usageCharges {
			for _, alg := range sluice.Algos() {
				t.Run(fmt.Sprintf("clock=%v/%v/%s", clock, charge, alg), func(t *testing.T) {
					s := newCallerStore(t, srv)
					if clock {
						s = newCallerStore(t, srv, redis.WithStoreClock())
					}
					rule := prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: l, Charge: charge})
					ref := newAlgoRef(t, rule)
					checks := []sluice.Check{{Rule: rule, Key: "k"}}
					out := make([]sluice.Decision, 1)
					start := t0.Truncate(time.Second)
					seen := map[string]int{}
					defer func() {
						if seen["allowed"] == 0 || seen["denied"]+seen["denied-ns"] == 0 || seen["never"] == 0 {
							t.Errorf("decisions %v, want every kind", seen)
						}
					}()
					for i, st := range steps {
						want := ref.step(start.Add(st.at), st.n)
						seen[kindOf(want)]++
						if err := s.Take(ctx, start.Add(st.at), costed(st.n, checks), out); err != nil {
							t.Fatal(err)
						}
						if out[0] != want {
							t.Fatalf("step %d: Take(+%v, %d) = %+v, want %+v", i, st.at, st.n, out[0], want)
						}
					}
				})
			}
		}
	}
}

// TestUsageDebtTTL: a bucket's key in debt past a full bucket's lives as
// long as its debt, however it is written: by the usage rule that took it
// there, and by a gate rule of the same limit whose denial, on the
// one-unit path, writes the debt drained since.
func TestUsageDebtTTL(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0))
	l := sluice.PerHour(10)
	usage := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: l, Charge: sluice.ChargeUsage}), Key: "k"}
	gate := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: l}), Key: "k"}
	pttl := func() time.Duration {
		t.Helper()
		keys := stateKeys(scanKeys(t, rc, p))
		if len(keys) != 1 {
			t.Fatalf("keys %v, want 1", keys)
		}
		ttl, err := rc.PTTL(context.Background(), keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ttl
	}
	d := take(t, s, time.Time{}, 25, usage)[0]
	if d.Allowed || d.ResetAfter < 2*time.Hour-time.Minute {
		t.Fatalf("usage of 25 on 10 an hour = %+v, want denied, two hours of debt", d)
	}
	if ttl := pttl(); ttl < d.ResetAfter {
		t.Fatalf("PTTL %v after the usage, want at least its ResetAfter %v", ttl, d.ResetAfter)
	}
	d = take(t, s, time.Time{}, 1, gate)[0]
	if d.Allowed || d.ResetAfter < 2*time.Hour-time.Minute {
		t.Fatalf("gate request in debt = %+v, want denied, two hours of debt", d)
	}
	if ttl := pttl(); ttl < d.ResetAfter {
		t.Fatalf("PTTL %v after the gate request, want at least its ResetAfter %v", ttl, d.ResetAfter)
	}
}
