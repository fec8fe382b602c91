package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// traceKeys are the keys traces spread over: plain, an address, non-ASCII.
var traceKeys = []string{"alice", "203.0.113.7", "ключ"}

const (
	traceSeeds = 2
	traceSteps = 150
)

// gen makes a trace's random steps from a fixed seed.
type gen struct {
	s   *suite
	rnd *rand.Rand
}

func (s *suite) gen(seed uint64) gen { return gen{s, rand.New(rand.NewPCG(seed, 0x5eed))} }

// step is the time to the next request: often none or the least there is,
// often a fraction of the rules' shortest emission interval, sometimes
// around a period, now and then several periods, which empties every
// limiter. It is a multiple of the resolution.
func (g gen) step(emit, period time.Duration) time.Duration {
	var d time.Duration
	switch x := g.rnd.IntN(100); {
	case x < 25:
	case x < 40:
		d = time.Duration(1+g.rnd.IntN(3)) * g.s.cfg.Resolution
	case x < 80:
		d = time.Duration(g.rnd.Int64N(2 * int64(emit)))
	case x < 95:
		d = time.Duration(g.rnd.Int64N(2 * int64(period)))
	default:
		d = 3*period + time.Duration(g.rnd.Int64N(int64(period)))
	}
	return g.s.floor(d)
}

// cost is a request's cost: -1 now and then, else 0 to quota + 1.
func (g gen) cost(quota int64) int64 {
	if g.rnd.IntN(50) == 0 {
		return -1
	}
	return g.rnd.Int64N(quota + 2)
}

// emission is the time one unit takes to refill: Period/Rate, or Period
// for a rate of 0.
func emission(l sluice.Limit) time.Duration {
	if l.Rate <= 0 || int64(l.Period)/l.Rate == 0 {
		return l.Period
	}
	return time.Duration(int64(l.Period) / l.Rate)
}

// testTrace checks one rule at a time against a fresh single-key limiter
// per key.
func (s *suite) testTrace(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		for _, l := range s.traceLimits() {
			t.Run(fmt.Sprintf("%s/%v", a, l), func(t *testing.T) {
				st := s.cfg.New(t)
				for seed := range uint64(traceSeeds) {
					r := rule(fmt.Sprintf("trace-%s-%d", a, seed), a, l)
					s.runTrace(t, st, r, seed)
				}
			})
		}
	}
}

func (s *suite) runTrace(t *testing.T, st sluice.Store, r *sluice.PreparedRule, seed uint64) {
	t.Helper()
	g := s.gen(seed)
	refs := make(map[string]sluice.Algorithm)
	for _, k := range traceKeys {
		refs[k] = s.reference(t, st, r)
	}
	t0 := s.t0()
	now := t0
	for i := range traceSteps {
		now = now.Add(g.step(emission(r.Rule().Limit), r.Rule().Limit.Period))
		key := traceKeys[g.rnd.IntN(len(traceKeys))]
		n := g.cost(r.Quota())
		got := take(t, st, now, n, sluice.Check{Rule: r, Key: key})[0]
		want := s.expect(refs[key].AllowN(now, n))
		if got != want {
			t.Fatalf("seed %d step %d: Take(%s, %d) on %q = %+v, want %+v", seed, i, rel(t0, now), n, key, got, want)
		}
	}
}

const (
	policySeeds = 6
	policySteps = 120
)

// testPolicy checks requests against two or three rules at once, one of
// them in shadow mode in every other trace, against the all-or-nothing
// model. Now and then a check has a cost of its own (Check.Cost).
func (s *suite) testPolicy(t *testing.T) {
	for seed := range uint64(policySeeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			st := s.cfg.New(t)
			g := s.gen(100 + seed)
			ls := s.limits()
			rules := make([]*sluice.PreparedRule, 2+g.rnd.IntN(2))
			emit, period := time.Duration(1<<62), time.Duration(0)
			quota := int64(0)
			for i := range rules {
				a := s.cfg.Algorithms[g.rnd.IntN(len(s.cfg.Algorithms))]
				l := ls[g.rnd.IntN(len(ls))]
				rules[i] = rule(fmt.Sprintf("policy-%d-%d", seed, i), a, l)
				emit, period = min(emit, emission(l)), max(period, l.Period)
				quota = max(quota, rules[i].Quota())
			}
			if seed%2 == 1 {
				i := g.rnd.IntN(len(rules))
				r := rules[i].Rule()
				r.Shadow = true
				rules[i] = prepare(r)
			}
			m := newModel(t, s.arithOf(t, st))
			t0 := s.t0()
			now := t0
			checks := make([]sluice.Check, len(rules))
			for i := range policySteps {
				now = now.Add(g.step(emit, period))
				for j, r := range rules {
					checks[j] = sluice.Check{Rule: r, Key: traceKeys[g.rnd.IntN(2)]}
					if g.rnd.IntN(3) == 0 {
						checks[j].Cost = g.cost(r.Quota()) // 0 now and then: the request's
					}
				}
				n := g.cost(quota)
				got := take(t, st, now, n, checks...)
				want := m.take(now, costed(n, checks))
				for j := range checks {
					if w := s.expect(want[j]); got[j] != w {
						t.Fatalf("step %d: Take(%s, %d, %s): check %d = %+v, want %+v\n(all: %+v, want %+v)",
							i, rel(t0, now), n, describe(checks), j, got[j], w, got, want)
					}
				}
			}
		})
	}
}
