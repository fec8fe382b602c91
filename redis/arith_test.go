package redis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// A vector is a sequence of transitions of one key: each a time (µs from
// the vector's base) and a cost, replayed through the Store and through
// internal/algo (algoRef), whose decisions must agree in every field.
type vector struct {
	name  string
	alg   sluice.Algo
	limit sluice.Limit
	base  time.Time
	steps []transition
}

type transition struct {
	at int64 // µs after the vector's base
	n  int64
}

var charges = []sluice.Charge{sluice.ChargeGate, sluice.ChargeUsage, sluice.ChargeCount}

// generated are a few hundred random transitions per algorithm, around
// the limit's emission interval, with steps back, long jumps and costs from
// -1 to past the quota (MaxInt64 included).
func generated() []vector {
	var vs []vector
	limits := []sluice.Limit{
		{Rate: 5, Period: time.Second, Burst: 8},
		{Rate: 7, Period: 150 * time.Millisecond},
	}
	for ai, alg := range sluice.Algos() {
		for li, l := range limits {
			rng := rand.New(rand.NewPCG(uint64(ai), uint64(li)))
			quota := max(l.Capacity(), l.Rate, 1)
			ts, ns := trace(rng, l, 300)
			v := vector{name: fmt.Sprintf("generated/%s/%v", alg, l), alg: alg, limit: l, base: t0}
			for i := range ts {
				v.steps = append(v.steps, transition{ts[i].Sub(t0).Microseconds(), usageCost(rng, quota, ns[i])})
			}
			vs = append(vs, v)
		}
	}
	return vs
}

// edge are transitions at the arithmetic's limits: the largest limits the
// store accepts, tiny rates, cost = burst and more, time going back, and
// times near the largest the store takes (2^52 µs).
func edge() []vector {
	bucket := []sluice.Limit{
		{Rate: 4_503_599_627_370, Period: time.Nanosecond}, // 2^52/1000 ticks a µs, the most
		{Rate: 1e12, Period: time.Second},
		{Rate: 26003, Period: 24 * time.Hour}, // a full bucket just under 2^51 units
		{Rate: 1, Period: 24 * time.Hour, Burst: 1},
		{Rate: 1, Period: time.Microsecond, Burst: 1},
		{Rate: 3, Period: 7 * time.Nanosecond, Burst: 5},
		// Primes per day, week and year: the script decides these at 1ms
		// or 1s, where a full bucket fits in 2^51 units.
		{Rate: 30011, Period: 24 * time.Hour},
		{Rate: 99991, Period: 24 * time.Hour},
		{Rate: 7, Period: 7 * 24 * time.Hour},
		{Rate: 7919, Period: 7 * 24 * time.Hour},
		{Rate: 1000003, Period: 365 * 24 * time.Hour},
		{Rate: 1, Period: 365 * 24 * time.Hour, Burst: 1 << 20},
	}
	window := []sluice.Limit{
		{Rate: 1e12, Period: (1 << 51) * time.Microsecond}, // the largest rate and period
		{Rate: 1e12, Period: time.Second},
		{Rate: 1, Period: 24 * time.Hour},
		{Rate: 1, Period: time.Microsecond},
		{Rate: 3, Period: 3 * time.Microsecond},
		{Rate: 99991, Period: 24 * time.Hour},
		{Rate: 7, Period: 7 * 24 * time.Hour},
		{Rate: 1000003, Period: 365 * 24 * time.Hour},
	}
	logs := []sluice.Limit{
		{Rate: 1 << 20, Period: time.Second}, // the largest sliding log
		{Rate: 1, Period: 24 * time.Hour},
		{Rate: 1, Period: time.Microsecond},
		{Rate: 4, Period: 3 * time.Microsecond},
		{Rate: 30011, Period: 24 * time.Hour},
		{Rate: 7, Period: 7 * 24 * time.Hour},
	}
	near := time.UnixMicro(1<<52 - 1<<40) // a base near the largest time
	var vs []vector
	for _, alg := range sluice.Algos() {
		ls := window
		switch alg {
		case sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA:
			ls = bucket
		case sluice.AlgoSlidingLog:
			ls = logs
		}
		for _, l := range ls {
			for _, base := range []time.Time{t0, near} {
				if base == near && l.Period > time.Hour {
					continue // its windows would pass the largest time
				}
				vs = append(vs, vector{name: fmt.Sprintf("edge/%s/%v/%d", alg, l, base.UnixMicro()), alg: alg, limit: l, base: base, steps: edgeSteps(l, base)})
			}
		}
	}
	return vs
}

// edgeSteps charges the whole quota, then more than it, peeks, steps
// back, and waits a fraction of a period, a period and more: for a period
// too long for that from base, as much of one as the largest time allows.
func edgeSteps(l sluice.Limit, base time.Time) []transition {
	q := max(l.Capacity(), l.Rate, 1)
	p := min(max(l.Period.Microseconds(), 1), (1<<52-base.UnixMicro())/21)
	return []transition{
		{0, q}, {0, 1}, {0, q}, {0, q + 1}, {0, 0}, {0, -1},
		{p / 3, 1}, {p / 3, q}, {p/3 - p/7 - 1, 1}, {1, 0}, // back, then back again before the first
		{p, 1}, {p, q - 1}, {p + 1, q}, {p + p/2, 2}, {p + p/2, math.MaxInt64},
		{2 * p, 0}, {2*p + 1, q + 1}, {3 * p, 1}, {3 * p, q}, {5 * p, q},
		{5*p + p/2, 1}, {8 * p, 0}, {8*p - 3, 1}, {20 * p, q}, {20 * p, 1},
	}
}

// TestArithmetic replays every vector through the Store, at the caller's
// time and under the store's clock, for each charge, and through
// internal/algo: every field of every decision is the same. The one-byte
// paths (cost 1, gate) and the general path both meet the vectors.
func TestArithmetic(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	for _, v := range append(generated(), edge()...) {
		for _, charge := range charges {
			for _, clock := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/clock=%v", v.name, charge, clock), func(t *testing.T) {
					opts := []redis.Option{}
					if clock {
						opts = append(opts, redis.WithStoreClock())
					}
					s := newCallerStoreOn(t, rc, opts...)
					rule := prep(sluice.Rule{Name: "r", Algorithm: v.alg, Limit: v.limit, Charge: charge})
					ref := newAlgoRef(t, rule)
					checks := []sluice.Check{{Rule: rule, Key: "k"}}
					out := make([]sluice.Decision, 1)
					latest := int64(math.MinInt64)
					for i, st := range v.steps {
						at := st.at
						if clock {
							// The store's clock never goes back, even for a
							// key gone idle, whose algorithm starts afresh.
							at = max(at, latest)
						}
						latest = max(latest, at)
						now := v.base.Add(time.Duration(at) * time.Microsecond)
						want := ref.step(now, st.n)
						if err := s.Take(ctx, now, costed(st.n, checks), out); err != nil {
							t.Fatalf("step %d: Take(base%+dµs, %d): %v", i, at, st.n, err)
						}
						if out[0] != want {
							t.Fatalf("step %d: Take(base%+dµs, %d) = %+v, want %+v", i, at, st.n, out[0], want)
						}
					}
				})
			}
		}
	}
}
