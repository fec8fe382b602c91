package storetest

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// usageCharges are the two ways to charge usage after the fact.
var usageCharges = []sluice.Charge{sluice.ChargeUsage, sluice.ChargeCount}

func usageRule(name string, a sluice.Algo, l sluice.Limit, c sluice.Charge) *sluice.PreparedRule {
	return prepare(sluice.Rule{Name: name, Algorithm: a, Limit: l, Charge: c})
}

// usageCost is a usage check's cost: mostly as a gate check's, often past
// what is left or the whole quota, now and then far past it.
func (g gen) usageCost(quota int64) int64 {
	switch g.rnd.IntN(12) {
	case 0:
		return 2*quota + 1 + g.rnd.Int64N(quota+1)
	case 1:
		if g.rnd.IntN(4) == 0 {
			return math.MaxInt64
		}
		return quota + g.rnd.Int64N(quota+1)
	}
	return g.cost(quota)
}

// testUsageTrace checks one usage or count rule at a time against the
// single-key arithmetic charged the same way, key by key.
func (s *suite) testUsageTrace(t *testing.T) {
	for _, c := range usageCharges {
		for _, a := range s.cfg.Algorithms {
			for _, l := range s.traceLimits() {
				t.Run(fmt.Sprintf("%v/%s/%v", c, a, l), func(t *testing.T) {
					st := s.cfg.New(t)
					for seed := range uint64(traceSeeds) {
						r := usageRule(fmt.Sprintf("utrace-%s-%d", a, seed), a, l, c)
						s.runUsageTrace(t, st, r, 200+seed)
					}
				})
			}
		}
	}
}

func (s *suite) runUsageTrace(t *testing.T, st sluice.Store, r *sluice.PreparedRule, seed uint64) {
	t.Helper()
	g := s.gen(seed)
	refs := make(map[string]*machine)
	for _, k := range traceKeys {
		refs[k] = new(machine)
	}
	ar := s.arithOf(t, st)(r)
	t0 := s.t0()
	now := t0
	for i := range traceSteps {
		now = now.Add(g.step(emission(r.Rule().Limit), r.Rule().Limit.Period))
		key := traceKeys[g.rnd.IntN(len(traceKeys))]
		n := g.usageCost(r.Quota())
		got := take(t, st, now, n, sluice.Check{Rule: r, Key: key})[0]
		want := s.expect(refs[key].step(t, ar, now, n))
		if got != want {
			t.Fatalf("seed %d step %d: Take(%s, %d) on %q = %+v, want %+v", seed, i, rel(t0, now), n, key, got, want)
		}
	}
}

// testUsagePolicy checks requests against two or three rules at once, of
// every charge, some in shadow mode, against the model: usage checks
// always recorded, gate checks all-or-nothing.
func (s *suite) testUsagePolicy(t *testing.T) {
	charges := []sluice.Charge{sluice.ChargeGate, sluice.ChargeUsage, sluice.ChargeCount}
	for seed := range uint64(policySeeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			st := s.cfg.New(t)
			g := s.gen(300 + seed)
			ls := s.limits()
			rules := make([]*sluice.PreparedRule, 2+g.rnd.IntN(2))
			emit, period := time.Duration(1<<62), time.Duration(0)
			quota := int64(0)
			for i := range rules {
				a := s.cfg.Algorithms[g.rnd.IntN(len(s.cfg.Algorithms))]
				l := ls[g.rnd.IntN(len(ls))]
				c := charges[g.rnd.IntN(len(charges))]
				if i == 0 {
					c = usageCharges[seed%2] // at least one usage rule
				}
				rules[i] = usageRule(fmt.Sprintf("upolicy-%d-%d", seed, i), a, l, c)
				emit, period = min(emit, emission(l)), max(period, l.Period)
				quota = max(quota, rules[i].Quota())
			}
			if seed%3 != 0 {
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
						checks[j].Cost = g.usageCost(r.Quota())
					}
				}
				n := g.usageCost(quota)
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

// testUsageLLM is the token budget of an LLM gateway: a check of cost 0
// when a request arrives, the tokens it used (150) charged when it ends,
// on a budget of 100 an hour. The first check passes; the first charge
// is recorded though it is over, so every check after it is denied, and
// every charge too. Two hours later the budget is whole again.
func (s *suite) testUsageLLM(t *testing.T) {
	for _, c := range usageCharges {
		for _, a := range s.cfg.Algorithms {
			t.Run(fmt.Sprintf("%v/%s", c, a), func(t *testing.T) {
				if !s.fits(sluice.PerHour(100)) {
					t.Skipf("100 is above MaxRate %d", s.cfg.MaxRate)
				}
				st := s.cfg.New(t)
				ch := sluice.Check{Rule: usageRule("llm-tokens", a, sluice.PerHour(100), c), Key: "api-key-1"}
				t0 := s.t0()
				now := t0
				for i := range 20 {
					check := take(t, st, now, 0, ch)[0]
					if check.Allowed != (i == 0) {
						t.Fatalf("round %d: the check of cost 0 at %s = %+v, want Allowed %v", i, rel(t0, now), check, i == 0)
					}
					now = now.Add(s.floor(time.Second))
					if charge := take(t, st, now, 150, ch)[0]; charge.Allowed || charge.RetryAfter != sluice.Never || charge.Remaining != 0 {
						t.Fatalf("round %d: the charge of 150 at %s = %+v, want denied, Never, Remaining 0", i, rel(t0, now), charge)
					}
					now = now.Add(s.floor(time.Second))
				}
				later := now.Add(2 * time.Hour)
				if got := take(t, st, later, 0, ch)[0]; !got.Allowed || got.Remaining != 100 {
					t.Errorf("two hours later, the check of cost 0 = %+v, want allowed with the whole budget left", got)
				}
			})
		}
	}
}

// testUsageCap: a charge of MaxInt64 is recorded up to the cap, one more
// quota, and no further: the key waits at most two periods to be whole
// again, and is whole after them.
func (s *suite) testUsageCap(t *testing.T) {
	for _, c := range usageCharges {
		for _, a := range s.cfg.Algorithms {
			t.Run(fmt.Sprintf("%v/%s", c, a), func(t *testing.T) {
				st := s.cfg.New(t)
				ch := sluice.Check{Rule: usageRule("cap", a, sluice.PerHour(10), c), Key: "k"}
				t0 := s.t0()
				for i := range 3 {
					d := take(t, st, t0, math.MaxInt64, ch)[0]
					if d.Allowed || d.RetryAfter != sluice.Never || d.Remaining != 0 || d.ResetAfter > 2*time.Hour {
						t.Fatalf("charge %d of MaxInt64 = %+v, want denied, Never, Remaining 0, ResetAfter at most 2h", i, d)
					}
				}
				if d := take(t, st, t0.Add(2*time.Hour), 0, ch)[0]; !d.Allowed || d.Remaining != 10 {
					t.Errorf("two hours later: %+v, want allowed with the whole quota", d)
				}
			})
		}
	}
}

// testUsageMixed: a usage rule and a gate rule in one request. The usage
// rule is recorded when the gate rule denies; when the usage rule denies,
// the gate rule is not charged; a shadow usage rule is recorded and never
// blocks.
func (s *suite) testUsageMixed(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			t0 := s.t0()
			gate := sluice.Check{Rule: rule("mixed-gate", a, sluice.PerHour(3)), Key: "k"}
			use := sluice.Check{Rule: usageRule("mixed-usage", a, sluice.PerHour(10), sluice.ChargeUsage), Key: "k"}
			take(t, st, t0, 3, gate) // the gate rule is spent
			if got := take(t, st, t0, 4, gate, use); got[0].Allowed || !got[1].Allowed {
				t.Fatalf("Take(t0, 4, gate+usage) = %+v, want the gate denying, the usage allowing", got)
			}
			if got := peek(t, st, t0, use); got.Remaining != 6 {
				t.Errorf("after the gate denied, the usage rule = %+v, want Remaining 6: it is recorded all the same", got)
			}
		})
		t.Run(string(a)+"/usage-denies", func(t *testing.T) {
			st := s.cfg.New(t)
			t0 := s.t0()
			gate := sluice.Check{Rule: rule("mixed-gate", a, sluice.PerHour(5)), Key: "k"}
			use := sluice.Check{Rule: usageRule("mixed-usage", a, sluice.PerHour(10), sluice.ChargeUsage), Key: "k"}
			before := peek(t, st, t0, gate)
			checks := []sluice.Check{costing(gate, 1), costing(use, 12)}
			got := take(t, st, t0, 0, checks...)
			if !got[0].Allowed || got[1].Allowed {
				t.Fatalf("Take(t0, gate 1 + usage 12 on 10) = %+v, want the gate allowing, the usage denying", got)
			}
			if got[0] != before {
				t.Errorf("the gate's decision = %+v, want its uncharged state %+v", got[0], before)
			}
			if after := peek(t, st, t0, gate); after != before {
				t.Errorf("after the usage rule denied, the gate = %+v, want %+v: it was charged", after, before)
			}
			if c := sluice.Combine(checks, got); c.Allowed {
				t.Errorf("combined %+v, want denied", c)
			}
			// The usage rule is in debt: its check of cost 0 is denied.
			if got := peek(t, st, t0, use); got.Allowed || got.Remaining != 0 {
				t.Errorf("the usage rule after 12 of 10 = %+v, want denied with Remaining 0", got)
			}
		})
		t.Run(string(a)+"/shadow-usage", func(t *testing.T) {
			st := s.cfg.New(t)
			t0 := s.t0()
			gate := sluice.Check{Rule: rule("mixed-gate", a, sluice.PerHour(5)), Key: "k"}
			sr := prepare(sluice.Rule{Name: "mixed-shadow-usage", Algorithm: a, Limit: sluice.PerHour(10), Charge: sluice.ChargeUsage, Shadow: true})
			sh := sluice.Check{Rule: sr, Key: "k"}
			checks := []sluice.Check{costing(gate, 1), costing(sh, 8)}
			for i := range 3 {
				got := take(t, st, t0, 0, checks...)
				if !got[0].Allowed || got[1].Allowed != (i == 0) {
					t.Fatalf("request %d: Take(t0, gate 1 + shadow usage 8) = %+v, want the gate allowing, the shadow Allowed %v", i, got, i == 0)
				}
				if c := sluice.Combine(checks, got); !c.Allowed {
					t.Fatalf("request %d: combined %+v, want allowed: a shadow rule never denies", i, c)
				}
			}
			if got := peek(t, st, t0, gate); got.Remaining != 2 {
				t.Errorf("the gate after 3 allowed requests = %+v, want Remaining 2", got)
			}
			// 24 units of 10 recorded, up to the cap of 20: in debt.
			if got := peek(t, st, t0, sh); got.Allowed {
				t.Errorf("the shadow usage rule after 24 of 10 = %+v, want denied (in debt)", got)
			}
			// A denial by the enforced gate rule still records the shadow.
			take(t, st, t0, 2, gate) // the gate rule is spent
			other := sluice.Check{Rule: sr, Key: "other"}
			if got := take(t, st, t0, 0, costing(gate, 1), costing(other, 4)); got[0].Allowed || !got[1].Allowed {
				t.Fatalf("Take(t0, spent gate + shadow usage 4) = %+v, want the gate denying, the shadow allowing", got)
			}
			if got := peek(t, st, t0, other); got.Remaining != 6 {
				t.Errorf("the shadow usage rule after a denied request = %+v, want Remaining 6: it is recorded", got)
			}
		})
	}
}

// costing is c with a cost of its own.
func costing(c sluice.Check, n int64) sluice.Check {
	c.Cost = n
	return c
}

// testUsageZero: the checks of cost 0. At exactly nothing left a usage
// rule denies (it needs a unit) and a count rule allows (envoyproxy/
// ratelimit's answer: over only past the limit); one unit past, both deny;
// a gate rule's peek always allows.
func (s *suite) testUsageZero(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			t0 := s.t0()
			l := sluice.PerHour(4)
			use := sluice.Check{Rule: usageRule("zero", a, l, sluice.ChargeUsage), Key: "k"}
			count := sluice.Check{Rule: usageRule("zero", a, l, sluice.ChargeCount), Key: "k"}
			gate := sluice.Check{Rule: rule("zero", a, l), Key: "k"}
			if got := take(t, st, t0, 4, use)[0]; !got.Allowed || got.Remaining != 0 {
				t.Fatalf("Take(t0, 4) of 4 = %+v, want allowed, Remaining 0", got)
			}
			for _, c := range []struct {
				ch   sluice.Check
				want bool
			}{{use, false}, {count, true}, {gate, true}} {
				if got := take(t, st, t0, 0, c.ch)[0]; got.Allowed != c.want || got.Remaining != 0 {
					t.Errorf("%v check of cost 0 at nothing left = %+v, want Allowed %v", c.ch.Rule.Rule().Charge, got, c.want)
				}
			}
			if got := take(t, st, t0, 1, count)[0]; got.Allowed {
				t.Fatalf("Take(t0, 1) at nothing left = %+v, want denied", got)
			}
			for _, c := range []struct {
				ch   sluice.Check
				want bool
			}{{use, false}, {count, false}, {gate, true}} {
				if got := take(t, st, t0, 0, c.ch)[0]; got.Allowed != c.want || got.Remaining != 0 {
					t.Errorf("%v check of cost 0 a unit past the limit = %+v, want Allowed %v", c.ch.Rule.Rule().Charge, got, c.want)
				}
			}
		})
	}
}

// testUsageConcurrent: 16 goroutines charging 3 units at a time of one
// usage key, all at once, are allowed exactly 33 (99 units); every charge
// is recorded, up to the cap, so the key is left in debt.
func (s *suite) testUsageConcurrent(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			if !s.fits(sluice.PerHour(quota)) {
				t.Skipf("quota %d is above MaxRate %d", quota, s.cfg.MaxRate)
			}
			st := s.cfg.New(t)
			r := usageRule("concurrent-usage", a, sluice.PerHour(quota), sluice.ChargeCount)
			c := sluice.Check{Rule: r, Key: "shared"}
			t0 := s.t0()
			allowed := make([]int64, goroutines)
			hammer(t, func(g int) error {
				out := make([]sluice.Decision, 1)
				for range 10 {
					if err := st.Take(context.Background(), t0, []sluice.Check{costing(c, 3)}, out); err != nil {
						return err
					}
					if out[0].Allowed {
						allowed[g]++
					}
				}
				return nil
			})
			if total := sum(allowed); total != quota/3 {
				t.Errorf("%d goroutines charging 3 at a time were allowed %d in total, want exactly %d", goroutines, total, quota/3)
			}
			// In debt: a count rule's check of cost 0 is over.
			if got := peek(t, st, t0, c); got.Allowed || got.Remaining != 0 {
				t.Errorf("after 480 units charged of %d: %+v, want denied (in debt), Remaining 0", quota, got)
			}
		})
	}
}
