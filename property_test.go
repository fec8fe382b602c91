package sluice

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// op is one request of a trace: cost n at Unix ns at.
type op struct{ at, n int64 }

// The random limits mix round and odd rates (3/s, 7/min, a prime per
// second, 10^12 per second), periods from 1ns to a year, and bursts below,
// at and above the rate.
var (
	testRates   = []int64{0, 1, 2, 3, 5, 7, 10, 13, 60, 100, 1000, 999_983, 1_000_000_000_000}
	testPeriods = []time.Duration{time.Nanosecond, 7, time.Microsecond, time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
)

// randLimit returns a random valid limit that algorithm a accepts.
func randLimit(r *rand.Rand, a algorithm) Limit {
	for {
		l := Limit{Rate: testRates[r.IntN(len(testRates))], Period: testPeriods[r.IntN(len(testPeriods))]}
		switch r.IntN(4) {
		case 0:
			l.Rate = 1 + r.Int64N(50)
		case 1:
			l.Period = time.Duration(1 + r.Int64N(10_000_000_000))
		}
		switch r.IntN(3) {
		case 0:
			l.Burst = 1 + r.Int64N(2*min(l.Rate, 1000)+3)
		case 1:
			if l.Rate == 0 {
				l.Burst = 1 + r.Int64N(5)
			}
		}
		if a.kind == logKind && l.Rate > 2000 {
			continue // a ring of Rate cells per limiter: keep the replays cheap
		}
		if _, err := a.new(l); err == nil {
			return l
		}
	}
}

// horizon is how long a trace may run for the bucket arithmetic to stay
// exact, as documented in internal/algo: 2^62/q ns, with Period/Rate = p/q
// in lowest terms.
func horizon(l Limit) int64 {
	if l.Rate == 0 {
		return math.MaxInt64
	}
	g := new(big.Int).GCD(nil, nil, big.NewInt(int64(l.Period)), big.NewInt(l.Rate)).Int64()
	return (1 << 62) / (l.Rate / g)
}

// randTrace returns a trace of non-decreasing times starting somewhere in
// the first two periods after t0. The steps favour the instants where
// decisions change: zero steps, 1ns, whole emission intervals rounded
// either way, window boundaries and their neighbours.
func randTrace(r *rand.Rand, l Limit, capacity int64, steps int) []op {
	p := int64(l.Period)
	start := t0.UnixNano() + r.Int64N(2*p)
	end := start + min(horizon(l)/2, 1<<60)
	now := start
	ops := make([]op, 0, steps)
	for range steps {
		var dt int64
		switch x := r.IntN(20); {
		case x < 5:
			dt = 0
		case x < 7:
			dt = 1 + r.Int64N(3)
		case x < 11: // k emission intervals, rounded up, give or take 1ns
			if l.Rate == 0 {
				dt = p
				break
			}
			k := 1 + r.Int64N(3)
			dt = ceilNs(big.NewRat(k*p, l.Rate)).Nanoseconds() + r.Int64N(3) - 1
		case x < 14: // the next window boundary, give or take 1ns
			dt = (now/p+1)*p - now + r.Int64N(3) - 1
		case x < 18:
			dt = r.Int64N(2*p + 1)
		default:
			dt = r.Int64N(10*p + 1)
		}
		if dt < 0 || dt > end-now {
			dt = 0
		}
		now += dt
		ops = append(ops, op{now, randCost(r, capacity)})
	}
	return ops
}

// randCost is a cost in 0..capacity+1, mostly 1.
func randCost(r *rand.Rand, capacity int64) int64 {
	switch x := r.IntN(20); {
	case x < 8:
		return 1
	case x < 10:
		return 0
	case x < 13:
		return r.Int64N(capacity + 2)
	case x < 15:
		return capacity
	case x < 16:
		return capacity + 1
	default:
		return 1 + r.Int64N(min(capacity, 3)+1)
	}
}

// seeded is a fixed-seed source per test and algorithm, so that a failure
// reproduces.
func seeded(test string, a algorithm) *rand.Rand {
	var h uint64 = 14695981039346656037
	for _, c := range test + "/" + a.name {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return rand.New(rand.NewPCG(h, uint64(a.kind)))
}

func at(ns int64) time.Time { return time.Unix(0, ns) }

// replay returns a fresh limiter that has seen ops: a clone of the state
// any limiter that saw the same ops is in.
func replay(t *testing.T, a algorithm, l Limit, ops []op) Algorithm {
	t.Helper()
	x := mustNew(t, a, l)
	for _, o := range ops {
		x.AllowN(at(o.at), o.n)
	}
	return x
}

// TestModels holds every algorithm to its exact reference model over many
// random traces: the three buckets to both the textbook token bucket and its
// leaky bucket (which proves they make the same decisions, with water =
// B - tokens), the windows to theirs, under each charge. Every field must
// match: RetryAfter and ResetAfter are the exact rational waits rounded up
// to the ns.
func TestModels(t *testing.T) {
	for _, a := range chargedAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for i := range 400 {
				l := randLimit(r, a)
				x := mustNew(t, a, l)
				models := []model{newChargedModel(a.kind, l, a.charge)}
				if a.kind == bucketKind {
					models = append(models, newLeakyModel(l, a.charge))
				}
				ops := randTrace(r, l, a.capacity(l), 60)
				for _, o := range ops {
					got := x.AllowN(at(o.at), o.n)
					for _, m := range models {
						if want := m.allowN(o.at, o.n); got != want {
							t.Fatalf("trace %d, %v from t0=%v: AllowN(t0+%v, %d) = %+v, want %+v (%T)",
								i, l, at(ops[0].at), time.Duration(o.at-ops[0].at), o.n, got, want, m)
						}
					}
				}
			}
		})
	}
}

// TestLeakyQueueModel: Reserve makes the token bucket's decisions, and a
// request leaves once the units queued before it have drained.
func TestLeakyQueueModel(t *testing.T) {
	a := algorithms[0]
	r := seeded(t.Name(), a)
	for i := range 300 {
		l := randLimit(r, a)
		q, err := NewLeakyQueue(l)
		if err != nil {
			t.Fatal(err)
		}
		m := newTokenModel(l)
		ops := randTrace(r, l, l.Capacity(), 60)
		for _, o := range ops {
			rel, got := q.Reserve(at(o.at), o.n)
			m.allowN(o.at, 0) // bring the model to now before reading the wait
			wait := m.releaseAfter()
			want := m.allowN(o.at, o.n)
			wantRel := time.Time{}
			if want.Allowed {
				wantRel = at(o.at).Add(wait)
			}
			if got != want || !rel.Equal(wantRel) {
				t.Fatalf("trace %d, %v: Reserve(t0+%v, %d) = %v, %+v, want %v, %+v",
					i, l, time.Duration(o.at-ops[0].at), o.n, rel.Sub(at(o.at)), got, wantRel.Sub(at(o.at)), want)
			}
		}
	}
}

// TestRetryAfterTight: after a denial, the same request is allowed at
// now+RetryAfter and denied at now+RetryAfter-1ns and -1µs, if nothing else
// came. Each probe runs on its own clone, made by replaying the trace. For
// usage and count, the trace includes the denied request, recorded: the
// wait is from the state it left.
func TestRetryAfterTight(t *testing.T) {
	for _, a := range chargedAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			denials := 0
			for range 120 {
				l := randLimit(r, a)
				ops := randTrace(r, l, a.capacity(l), 40)
				x := mustNew(t, a, l)
				for i, o := range ops {
					d := x.AllowN(at(o.at), o.n)
					if d.Allowed || d.RetryAfter == Never {
						continue
					}
					denials++
					retry := o.at + d.RetryAfter.Nanoseconds()
					for _, p := range []struct {
						early time.Duration
						want  bool
					}{{0, true}, {time.Nanosecond, false}, {time.Microsecond, false}} {
						c := replay(t, a, l, ops[:i+1])
						probe := retry - p.early.Nanoseconds()
						if got := c.AllowN(at(probe), o.n); got.Allowed != p.want {
							t.Fatalf("%v: after AllowN(t0+%v, %d) = %+v, AllowN(t0+%v, %d) = %+v, want Allowed %v",
								l, time.Duration(o.at-ops[0].at), o.n, d, time.Duration(probe-ops[0].at), o.n, got, p.want)
						}
					}
				}
			}
			if denials < 200 {
				t.Errorf("only %d denials probed: the traces are too gentle", denials)
			}
		})
	}
}

// TestResetAfter: ResetAfter after the last request, with nothing else,
// the limiter is idle again (full remaining, a request of the whole
// capacity fits); for all but the sliding counter, whose weight of the
// previous window is invisible in whole units, 1ns earlier it is not.
func TestResetAfter(t *testing.T) {
	for _, a := range chargedAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for range 120 {
				l := randLimit(r, a)
				c := a.capacity(l)
				ops := randTrace(r, l, c, 30)
				x := replay(t, a, l, ops)
				last := ops[len(ops)-1].at
				d := x.AllowN(at(last), 0)
				if d.ResetAfter == Never {
					continue
				}
				idle := last + d.ResetAfter.Nanoseconds()
				if got := replay(t, a, l, ops).AllowN(at(idle), 0); got.Remaining != c || got.ResetAfter != 0 {
					t.Fatalf("%v: after AllowN(t0+%v, 0) = %+v, AllowN(t0+%v, 0) = %+v, want idle", l, time.Duration(last-ops[0].at), d, time.Duration(idle-ops[0].at), got)
				}
				// (A usage limiter of capacity 0 refuses even cost 0: no
				// unit is ever left.)
				if got := replay(t, a, l, ops).AllowN(at(idle), c); !got.Allowed && (c > 0 || a.charge != ChargeUsage) {
					t.Fatalf("%v: after AllowN(t0+%v, 0) = %+v, AllowN(t0+%v, %d) = %+v, want allowed", l, time.Duration(last-ops[0].at), d, time.Duration(idle-ops[0].at), c, got)
				}
				if d.ResetAfter > 0 && a.kind != counterKind {
					if got := replay(t, a, l, ops).AllowN(at(idle-1), 0); got.Remaining == c {
						t.Fatalf("%v: after AllowN(t0+%v, 0) = %+v, AllowN(t0+%v, 0) = %+v, want not idle yet", l, time.Duration(last-ops[0].at), d, time.Duration(idle-1-ops[0].at), got)
					}
				}
			}
		})
	}
}

// insert returns ops with extra requests of cost n() inserted at random
// places, at random times between their neighbours, and which of the
// result are the inserted ones.
func insert(r *rand.Rand, ops []op, n func() int64) (out []op, extra []bool) {
	prev := ops[0].at
	for _, o := range ops {
		for r.IntN(3) == 0 {
			prev += r.Int64N(o.at - prev + 1)
			out, extra = append(out, op{prev, n()}), append(extra, true)
		}
		out, extra = append(out, o), append(extra, false)
		prev = o.at
	}
	return out, extra
}

// TestPeekChangesNothing: AllowN(now, 0) consumes nothing, under every
// charge: a trace with peeks inserted gets the same decisions. A gate
// limiter's peek is always allowed (usage and count limiters answer by
// their thresholds, which TestModels checks).
func TestPeekChangesNothing(t *testing.T) {
	for _, a := range chargedAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for range 200 {
				l := randLimit(r, a)
				ops := randTrace(r, l, a.capacity(l), 40)
				with, peek := insert(r, ops, func() int64 { return 0 })
				plain, peeked := mustNew(t, a, l), mustNew(t, a, l)
				j := 0
				for i, o := range with {
					got := peeked.AllowN(at(o.at), o.n)
					if peek[i] {
						if a.charge == ChargeGate && (!got.Allowed || got.RetryAfter != 0) {
							t.Fatalf("%v: AllowN(t0+%v, 0) = %+v, want allowed", l, time.Duration(o.at-ops[0].at), got)
						}
						continue
					}
					if want := plain.AllowN(at(ops[j].at), ops[j].n); got != want {
						t.Fatalf("%v: with peeks before it, AllowN(t0+%v, %d) = %+v, want %+v as without", l, time.Duration(o.at-ops[0].at), o.n, got, want)
					}
					j++
				}
			}
		})
	}
}

// TestNegativeCost: a negative cost is refused with Never and changes
// nothing; its decision reports the state as a peek would.
func TestNegativeCost(t *testing.T) {
	negatives := []int64{-1, -2, -1000, math.MinInt64}
	for _, a := range chargedAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for range 200 {
				l := randLimit(r, a)
				ops := randTrace(r, l, a.capacity(l), 40)
				with, neg := insert(r, ops, func() int64 { return negatives[r.IntN(len(negatives))] })
				plain, x := mustNew(t, a, l), mustNew(t, a, l)
				j := 0
				for i, o := range with {
					got := x.AllowN(at(o.at), o.n)
					if neg[i] {
						peek := x.AllowN(at(o.at), 0)
						want := Decision{Limit: peek.Limit, Remaining: peek.Remaining, RetryAfter: Never, ResetAfter: peek.ResetAfter}
						if got != want {
							t.Fatalf("%v: AllowN(t0+%v, %d) = %+v, want %+v", l, time.Duration(o.at-ops[0].at), o.n, got, want)
						}
						continue
					}
					if want := plain.AllowN(at(ops[j].at), ops[j].n); got != want {
						t.Fatalf("%v: with negative costs before it, AllowN(t0+%v, %d) = %+v, want %+v as without", l, time.Duration(o.at-ops[0].at), o.n, got, want)
					}
					j++
				}
			}
		})
	}
}

// TestClockBackMintsNothing: a request whose time is earlier than a time
// already seen is never decided more permissively than the same request at
// the latest time seen, given the same history. The history is replayed
// with every time clamped to the latest seen so far; for usage and count
// it holds every request of positive cost, recorded whether allowed or
// not. A bucket kept in one word cannot tell a time gone back from debt,
// and caps a usage debt as of the request's own time: TestTATUsageLag in
// internal/algo holds it to the bound it keeps instead.
func TestClockBackMintsNothing(t *testing.T) {
	for _, a := range chargedAlgorithms {
		if a.kind == bucketKind && a.charge != ChargeGate {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			backs := 0
			for range 150 {
				l := randLimit(r, a)
				ops := randTrace(r, l, a.capacity(l), 30)
				// Within the horizon the bucket arithmetic is documented to
				// hold; a jump back further than 2^63/q ns wraps the ticks.
				back := min(2*int64(l.Period), horizon(l)/2)
				for i := range ops {
					if r.IntN(4) == 0 {
						ops[i].at -= r.Int64N(back + 1)
					}
				}
				x := mustNew(t, a, l)
				var history []op // the requests x allowed, at clamped times
				seen := int64(math.MinInt64)
				for _, o := range ops {
					if o.at < seen {
						backs++
					}
					seen = max(seen, o.at)
					got := x.AllowN(at(o.at), o.n)
					c := replay(t, a, l, history)
					want := c.AllowN(at(seen), o.n)
					if (got.Allowed && !want.Allowed) || (got.Allowed == want.Allowed && got.Remaining > want.Remaining) {
						t.Fatalf("%v: AllowN(t0+%v, %d) = %+v after the clock went back to it from t0+%v, where it gets %+v",
							l, time.Duration(o.at-ops[0].at), o.n, got, time.Duration(seen-ops[0].at), want)
					}
					if got.Allowed || a.charge != ChargeGate && o.n > 0 {
						history = append(history, op{seen, o.n})
					}
				}
			}
			if backs < 300 {
				t.Errorf("only %d steps back: the traces are too gentle", backs)
			}
		})
	}
}

// allowedOps runs ops on a fresh limiter and returns those it allowed.
func allowedOps(t *testing.T, a algorithm, l Limit, ops []op) []op {
	t.Helper()
	x := mustNew(t, a, l)
	var ok []op
	for _, o := range ops {
		if x.AllowN(at(o.at), o.n).Allowed && o.n > 0 {
			ok = append(ok, o)
		}
	}
	return ok
}

// TestBucketBound: over any interval of length d a bucket never allows
// more than B + d·Rate/Period units, whatever usage it recorded besides.
func TestBucketBound(t *testing.T) {
	for _, a := range chargedAlgorithms {
		if a.kind != bucketKind {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for range 300 {
				l := randLimit(r, a)
				ok := allowedOps(t, a, l, randTrace(r, l, l.Capacity(), 60))
				for i := range ok {
					var sum int64
					for j := i; j < len(ok); j++ {
						sum += ok[j].n
						// (sum - B)·Period <= d·Rate
						lhs := new(big.Int).Mul(big.NewInt(sum-l.Capacity()), big.NewInt(int64(l.Period)))
						rhs := new(big.Int).Mul(big.NewInt(ok[j].at-ok[i].at), big.NewInt(l.Rate))
						if lhs.Cmp(rhs) > 0 {
							t.Fatalf("%v: %d units allowed in [t0+%v, t0+%v], more than %d + %v·%d/%v",
								l, sum, time.Duration(ok[i].at-ok[0].at), time.Duration(ok[j].at-ok[0].at), l.Capacity(), time.Duration(ok[j].at-ok[i].at), l.Rate, l.Period)
						}
					}
				}
			}
		})
	}
}

// TestWindowBounds: the sliding log never allows more than Rate in any
// window (t-P, t]; the fixed window and the sliding counter never more than
// Rate in an aligned window, so never more than 2·Rate in any (t-P, t];
// whatever usage they recorded besides.
func TestWindowBounds(t *testing.T) {
	for _, a := range chargedAlgorithms {
		if a.kind == bucketKind {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			for range 300 {
				l := randLimit(r, a)
				p := int64(l.Period)
				ok := allowedOps(t, a, l, randTrace(r, l, l.Rate, 60))
				bound := 2 * l.Rate
				if a.kind == logKind {
					bound = l.Rate
				}
				aligned := map[int64]int64{}
				for j, o := range ok {
					aligned[o.at/p] += o.n
					if aligned[o.at/p] > l.Rate {
						t.Fatalf("%v: %d units allowed in the window of t0+%v", l, aligned[o.at/p], time.Duration(o.at-ok[0].at))
					}
					var sum int64
					for i := j; i >= 0 && ok[i].at > o.at-p; i-- {
						sum += ok[i].n
					}
					if sum > bound {
						t.Fatalf("%v: %d units allowed in (t0+%v-%v, t0+%v], more than %d", l, sum, time.Duration(o.at-ok[0].at), l.Period, time.Duration(o.at-ok[0].at), bound)
					}
				}
			}
		})
	}
}

// TestUsageLeftAlone: however deep in debt usage took a limiter, left alone
// for the time its capped debt takes to drain (two periods for the
// windows; two capacities' refill for a bucket, two periods when Burst is
// Rate) it decides as a fresh one.
func TestUsageLeftAlone(t *testing.T) {
	for _, a := range chargedAlgorithms {
		if a.charge == ChargeGate {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			r := seeded(t.Name(), a)
			checked := 0
			for range 150 {
				l := randLimit(r, a)
				if l.Rate == 0 {
					continue // no debt: usage records only what fits
				}
				c := a.capacity(l)
				ops := randTrace(r, l, c, 30)
				// Charge far past the capacity, to the cap.
				ops = append(ops, op{ops[len(ops)-1].at, math.MaxInt64})
				wait := 2 * int64(l.Period)
				if a.kind == bucketKind {
					w := new(big.Rat).Mul(big.NewRat(2*c, l.Rate), ratInt(int64(l.Period)))
					wait = ceilNs(w).Nanoseconds()
				}
				last := ops[len(ops)-1].at
				if wait > horizon(l)/4 || last > math.MaxInt64/2-wait {
					continue
				}
				checked++
				// The cap: no decision on the way waits longer than that
				// for the limiter to be idle.
				x := mustNew(t, a, l)
				for _, o := range ops {
					if d := x.AllowN(at(o.at), o.n); d.ResetAfter > time.Duration(wait) {
						t.Fatalf("%v: AllowN(t0+%v, %d) = %+v: idle only after %v, past the cap's %v",
							l, time.Duration(o.at-ops[0].at), o.n, d, d.ResetAfter, time.Duration(wait))
					}
				}
				fresh := mustNew(t, a, l)
				later := randTrace(r, l, c, 20)
				shift := last + wait - later[0].at
				for _, o := range later {
					now := o.at + shift
					if got, want := x.AllowN(at(now), o.n), fresh.AllowN(at(now), o.n); got != want {
						t.Fatalf("%v: after a charge of MaxInt64 at t0+%v, AllowN(t0+%v, %d) = %+v, want %+v as on a fresh limiter",
							l, time.Duration(last-ops[0].at), time.Duration(now-ops[0].at), o.n, got, want)
					}
				}
			}
			if checked < 100 {
				t.Errorf("only %d limits checked", checked)
			}
		})
	}
}

// greedy asks for one unit at start and then again the moment it is told
// to, until end, and returns how many it got.
func greedy(x Algorithm, start, end time.Time) int64 {
	var got int64
	for now := start; !now.After(end); {
		d := x.AllowN(now, 1)
		switch {
		case d.Allowed:
			got++
		case d.RetryAfter == Never:
			return got
		default:
			now = now.Add(d.RetryAfter)
		}
	}
	return got
}

// TestGreedyClientGetsTheBound: a client that asks all the time gets
// exactly the bound: B + ⌊d·Rate/Period⌋ from a bucket over [t0, t0+d];
// Rate per aligned window from the fixed window; Rate per Period from the
// sliding log.
func TestGreedyClientGetsTheBound(t *testing.T) {
	limits := []Limit{PerSecond(5), PerSecond(3), PerMinute(7), {Rate: 1, Period: time.Second, Burst: 3}, {Rate: 7, Period: 3 * time.Second, Burst: 2}, {Rate: 13, Period: 999 * time.Millisecond}, {Rate: 0, Period: time.Second, Burst: 4}}
	r := rand.New(rand.NewPCG(7, 7))
	for _, a := range algorithms {
		if a.kind == counterKind {
			continue // an estimate, not a bound: TestModels holds it to its formula
		}
		for _, l := range limits {
			for range 20 {
				d := time.Duration(r.Int64N(5 * int64(l.Period)))
				x := mustNew(t, a, l)
				got := greedy(x, t0, t0.Add(d))
				var want int64
				switch p := int64(l.Period); a.kind {
				case bucketKind:
					want = l.Capacity() + new(big.Int).Div(big.NewInt(int64(d)*l.Rate), big.NewInt(p)).Int64()
				case fixedKind: // Rate in each window [t0, t0+d] touches
					want = l.Rate * ((t0.UnixNano()+int64(d))/p - t0.UnixNano()/p + 1)
				case logKind:
					want = l.Rate * (int64(d)/p + 1)
				}
				if got != want {
					t.Errorf("%s %v: a greedy client got %d in [t0, t0+%v], want %d", a.name, l, got, d, want)
				}
			}
		}
	}
}
