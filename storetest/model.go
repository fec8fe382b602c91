package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/ring"
)

// model is the reference a store is held to: per rule and key, a fresh
// single-key limiter, and the rule across checks: usage checks are always
// recorded; gate checks are charged all-or-nothing. It keeps each key's
// history and replays it to learn what a request would get without making
// it.
//
// A gate rule's key is replayed through the single-key algorithm
// (rule.Algorithm.New), relying on nothing but the Algorithm interface. A
// key with a usage or count rule in its history is replayed through the
// arithmetic the rules compile to (Rule.Prepare), which the single-key types
// share, each request with its own rule's charge: the root package's
// property tests hold that arithmetic, under every charge, to exact
// models. So is a bucket the store decides at a coarser unit of time than
// the single-key algorithm (see Config), at that unit, and a sliding log
// of more units than its key's history has requests (see longLog).
type model struct {
	t    *testing.T
	of   func(*sluice.PreparedRule) arith
	keys map[modelKey]*history
}

type modelKey struct {
	rule string
	key  string
}

type history struct {
	t    *testing.T
	of   func(*sluice.PreparedRule) arith
	rule *sluice.PreparedRule
	ops  []op
}

type op struct {
	at   time.Time
	n    int64
	rule *sluice.PreparedRule
}

// newModel makes a model of the store whose arithmetic of a rule of is.
func newModel(t *testing.T, of func(*sluice.PreparedRule) arith) *model {
	return &model{t: t, of: of, keys: make(map[modelKey]*history)}
}

func (m *model) history(c sluice.Check) *history {
	k := modelKey{c.Rule.Name(), c.Key}
	h := m.keys[k]
	if h == nil {
		h = &history{t: m.t, of: m.of, rule: c.Rule}
		m.keys[k] = h
	}
	return h
}

// decide is what the key's limiter says to n units at at under rule r,
// after its history, without recording it.
func (h *history) decide(r *sluice.PreparedRule, at time.Time, n int64) sluice.Decision {
	if r.Rule().Charge == sluice.ChargeGate && h.gateOnly() && h.of(h.rule).own && !h.longLog() {
		a, err := h.rule.Rule().Algorithm.New(h.rule.Rule().Limit)
		if err != nil {
			h.t.Fatalf("storetest: the suite made an invalid rule: %v", err)
		}
		for _, o := range h.ops {
			a.AllowN(o.at, o.n)
		}
		return a.AllowN(at, n)
	}
	mc := machine{logCap: len(h.ops) + 1}
	for _, o := range h.ops {
		mc.step(h.t, h.of(o.rule), o.at, o.n)
	}
	return mc.step(h.t, h.of(r), at, n)
}

// longLog reports whether the key's rule is a sliding log of more units
// than its history has requests: one replayed through the arithmetic with
// a ring of a cell per request makes the same decisions as through the
// single-key log, without allocating a cell per unit at every decision.
func (h *history) longLog() bool {
	k := h.of(h.rule).sp.Key
	return h.of(h.rule).kind == algo.KindLog && k.Rate > int64(len(h.ops)+1)
}

func (h *history) gateOnly() bool {
	for _, o := range h.ops {
		if o.rule.Rule().Charge != sluice.ChargeGate {
			return false
		}
	}
	return true
}

func (h *history) record(r *sluice.PreparedRule, at time.Time, n int64) {
	h.ops = append(h.ops, op{at, n, r})
}

// machine is one key's state under the compiled arithmetic (Rule.Prepare),
// kept as the single-key types keep theirs.
type machine struct {
	// logCap, if positive, is the most cells a sliding log's ring needs:
	// one per request the machine will see. A ring never full decides as
	// one of a cell per unit (algo.LogState).
	logCap int
	x      uint64
	wide   algo.Wide
	fixed  algo.FixedState
	ctr    algo.CounterState
	log    algo.LogState
}

func (m *machine) step(t *testing.T, a arith, at time.Time, n int64) sluice.Decision {
	sp := a.sp
	now := at.UnixNano()
	var d algo.Decision
	switch a.kind {
	case algo.KindBucket:
		d, m.x = a.tat.Step(m.x, now, n)
	case algo.KindWide:
		rel := a.tat.Enter(&m.wide, now)
		d, m.wide.X = a.tat.Step(m.wide.X, rel, n)
	case algo.KindFixed:
		d = sp.Window.Fixed(&m.fixed, now, n)
	case algo.KindCounter:
		d = sp.Window.Counter(&m.ctr, now, n)
	case algo.KindLog:
		switch {
		case m.log.Ring != nil:
		case m.logCap > 0 && int64(m.logCap) < sp.Key.Rate:
			m.log = algo.LogState{Ring: ring.New[algo.Entry](m.logCap)}
		default:
			m.log = sp.Log.NewState()
		}
		d = sp.Log.Step(&m.log, now, n)
	}
	return sluice.Decision(d)
}

// arith is a rule's arithmetic as the store under test decides it: the
// rule's own (Rule.Prepare), or, for a bucket that the store decides at a
// coarser unit of time (see Config), the same bucket at that unit.
type arith struct {
	sp   *algo.Spec
	kind algo.Kind
	tat  algo.TAT // the buckets'
	own  bool     // the rule's own arithmetic: its single-key algorithm decides alike
}

// resolver is a store that states the unit of time it decides a rule at
// (see Config).
type resolver interface {
	Resolution(rule *sluice.PreparedRule) (time.Duration, error)
}

// arithOf is the arithmetic of each rule as st decides it: its own, but
// for a bucket that st, a resolver, decides at a coarser unit.
func (s *suite) arithOf(t *testing.T, st sluice.Store) func(*sluice.PreparedRule) arith {
	rs, _ := st.(resolver)
	return func(r *sluice.PreparedRule) arith {
		a := ownArith(t, r)
		if rs == nil {
			return a
		}
		res, err := rs.Resolution(r)
		if err != nil {
			t.Fatalf("storetest: the store's Resolution(%q): %v", r.Name(), err)
		}
		switch a.kind {
		case algo.KindBucket, algo.KindWide:
			if res <= max(a.tat.Resolution(), s.cfg.Resolution) {
				return a // the suite's times are whole units of it already
			}
			tat, kind, ok := a.sp.BucketAt(res)
			if !ok {
				k := a.sp.Key
				t.Fatalf("storetest: the store decides %q (%d/%v burst %d) at %v, where the bucket cannot be kept exactly", r.Name(), k.Rate, k.Period, k.Burst, res)
			}
			a.tat, a.kind, a.own = tat, kind, false
		default:
			if res > s.cfg.Resolution {
				t.Fatalf("storetest: the store decides the window rule %q at %v, coarser than Config.Resolution (%v): the suite models only buckets at a coarser unit", r.Name(), res, s.cfg.Resolution)
			}
		}
		return a
	}
}

// ownArith is r's own arithmetic, as the single-key algorithms decide it.
func ownArith(t *testing.T, r *sluice.PreparedRule) arith {
	sp := algo.Of(r)
	if sp == nil {
		t.Fatalf("storetest: the suite made a rule it did not prepare")
	}
	return arith{sp: sp, kind: sp.Kind, tat: sp.TAT, own: true}
}

// reference is a fresh single-key limiter of r as st decides it: r's
// algorithm (rule.Algorithm.New) for a gate rule at its own unit, else its
// arithmetic as st decides it.
func (s *suite) reference(t *testing.T, st sluice.Store, r *sluice.PreparedRule) sluice.Algorithm {
	a := s.arithOf(t, st)(r)
	if a.own && r.Rule().Charge == sluice.ChargeGate {
		alg, err := r.Rule().Algorithm.New(r.Rule().Limit)
		if err != nil {
			t.Fatalf("storetest: the suite made an invalid rule: %v", err)
		}
		return alg
	}
	return &stepper{t: t, a: a}
}

// stepper is a machine as a sluice.Algorithm.
type stepper struct {
	t *testing.T
	a arith
	m machine
}

func (x *stepper) AllowN(now time.Time, n int64) sluice.Decision { return x.m.step(x.t, x.a, now, n) }

// take is the reference decision for a request against checks at now,
// which it records. Each check costs its Units. The usage
// checks (ChargeUsage, ChargeCount) are decided and recorded first, the
// enforced before the shadow ones; then the gate checks, in the same
// order, are charged if every enforced check, usage ones included,
// allows, and otherwise not: a gate check that would have allowed
// reports a peek.
func (m *model) take(now time.Time, checks []sluice.Check) []sluice.Decision {
	hs := make([]*history, len(checks))
	ds := make([]sluice.Decision, len(checks))
	for i, c := range checks {
		hs[i] = m.history(c)
	}
	allowed := true
	pass := func(gate bool) {
		for _, shadow := range []bool{false, true} {
			for i, c := range checks {
				if c.Rule.Shadow() != shadow || (c.Rule.Rule().Charge == sluice.ChargeGate) != gate {
					continue
				}
				ds[i] = hs[i].decide(c.Rule, now, c.Units())
				hs[i].record(c.Rule, now, c.Units())
				allowed = allowed && (shadow || ds[i].Allowed)
			}
		}
	}
	pass(false)
	marks := make(map[*history]int, len(hs))
	for _, h := range hs {
		marks[h] = len(h.ops)
	}
	pass(true)
	if allowed {
		return ds
	}
	for h, k := range marks {
		h.ops = h.ops[:k]
	}
	for i, c := range checks {
		if c.Rule.Rule().Charge != sluice.ChargeGate {
			continue
		}
		if ds[i].Allowed {
			ds[i] = hs[i].decide(c.Rule, now, 0) // would allow, not charged: a peek
		}
		hs[i].record(c.Rule, now, 0) // it was decided at now, charged nothing
	}
	return ds
}
