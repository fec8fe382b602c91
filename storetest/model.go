package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// model is the reference a store is held to: per rule and key, a fresh
// single-key limiter, and the all-or-nothing rule across checks. It keeps
// each key's history and replays it to learn what a request would get
// without making it, so it relies on nothing but the Algorithm interface.
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
	rule *sluice.Rule
	ops  []op
}

type op struct {
	at time.Time
	n  int64
}

func newModel(t *testing.T) *model { return &model{t: t, keys: make(map[modelKey]*history)} }

func (m *model) history(c sluice.Check) *history {
	k := modelKey{c.Rule.Name, c.Key}
	h := m.keys[k]
	if h == nil {
		h = &history{t: m.t, rule: c.Rule}
		m.keys[k] = h
	}
	return h
}

// decide is what the key's limiter says to n units at at, after its
// history, without recording it.
func (h *history) decide(at time.Time, n int64) sluice.Decision {
	a, err := h.rule.Algorithm.New(h.rule.Limit)
	if err != nil {
		h.t.Fatalf("storetest: the suite made an invalid rule: %v", err)
	}
	for _, o := range h.ops {
		a.AllowN(o.at, o.n)
	}
	return a.AllowN(at, n)
}

func (h *history) record(at time.Time, n int64) { h.ops = append(h.ops, op{at, n}) }

// take is the reference decision for a request of cost n against checks
// at now, which it records. Each check costs its CostFor(n).
func (m *model) take(now time.Time, n int64, checks []sluice.Check) []sluice.Decision {
	hs := make([]*history, len(checks))
	ds := make([]sluice.Decision, len(checks))
	allowed := true
	for i, c := range checks {
		hs[i] = m.history(c)
		ds[i] = hs[i].decide(now, c.CostFor(n))
		if !c.Rule.Shadow && !ds[i].Allowed {
			allowed = false
		}
	}
	for i := range checks {
		switch {
		case allowed || !ds[i].Allowed:
			hs[i].record(now, checks[i].CostFor(n)) // charged if it allows, nothing if not
		default:
			ds[i] = hs[i].decide(now, 0) // would allow, not charged: a peek
			hs[i].record(now, 0)
		}
	}
	return ds
}
