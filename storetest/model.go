package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
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
// models.
type model struct {
	t    *testing.T
	keys map[modelKey]*history
}

type modelKey struct {
	rule string
	key  string
}

type history struct {
	t    *testing.T
	rule *sluice.PreparedRule
	ops  []op
}

type op struct {
	at   time.Time
	n    int64
	rule *sluice.PreparedRule
}

func newModel(t *testing.T) *model { return &model{t: t, keys: make(map[modelKey]*history)} }

func (m *model) history(c sluice.Check) *history {
	k := modelKey{c.Rule.Name(), c.Key}
	h := m.keys[k]
	if h == nil {
		h = &history{t: m.t, rule: c.Rule}
		m.keys[k] = h
	}
	return h
}

// decide is what the key's limiter says to n units at at under rule r,
// after its history, without recording it.
func (h *history) decide(r *sluice.PreparedRule, at time.Time, n int64) sluice.Decision {
	if r.Rule().Charge == sluice.ChargeGate && h.gateOnly() {
		a, err := h.rule.Rule().Algorithm.New(h.rule.Rule().Limit)
		if err != nil {
			h.t.Fatalf("storetest: the suite made an invalid rule: %v", err)
		}
		for _, o := range h.ops {
			a.AllowN(o.at, o.n)
		}
		return a.AllowN(at, n)
	}
	var mc machine
	for _, o := range h.ops {
		mc.step(h.t, o.rule, o.at, o.n)
	}
	return mc.step(h.t, r, at, n)
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
	x     uint64
	wide  algo.Wide
	fixed algo.FixedState
	ctr   algo.CounterState
	log   algo.LogState
}

func (m *machine) step(t *testing.T, r *sluice.PreparedRule, at time.Time, n int64) sluice.Decision {
	sp := algo.Of(r)
	if sp == nil {
		t.Fatalf("storetest: the suite made a rule it did not prepare")
	}
	now := at.UnixNano()
	var d algo.Decision
	switch sp.Kind {
	case algo.KindBucket:
		d, m.x = sp.TAT.Step(m.x, now, n)
	case algo.KindWide:
		rel := sp.TAT.Enter(&m.wide, now)
		d, m.wide.X = sp.TAT.Step(m.wide.X, rel, n)
	case algo.KindFixed:
		d = sp.Window.Fixed(&m.fixed, now, n)
	case algo.KindCounter:
		d = sp.Window.Counter(&m.ctr, now, n)
	case algo.KindLog:
		if m.log.Ring == nil {
			m.log = sp.Log.NewState()
		}
		d = sp.Log.Step(&m.log, now, n)
	}
	return sluice.Decision(d)
}

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
