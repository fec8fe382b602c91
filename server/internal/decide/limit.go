package decide

import (
	"container/list"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
	"github.com/sluicehq/sluice/internal/sim"
)

// A Limit is one rule as the server checks it and as a response speaks of
// it, made once per rule when a config loads (or per limit override).
type Limit struct {
	// Rule is what is checked: the config's rule, or a copy as CheckedAs
	// says (in shadow mode, charged as envoyproxy/ratelimit counts),
	// prepared by the Limiter. A copy keeps the config's rule's state:
	// neither shadow mode nor the charge is part of a state's identity.
	Rule *sluice.PreparedRule
	// Declared is the rule as the config declares it: its shadow mode
	// decides a descriptor's status, and a reload keeps the Limit of a
	// rule declared alike.
	Declared sluice.Rule
	SF       string // the name as an RFC 8941 string
	JSONName string // the name as a JSON string, for a denial's body
	Policy   string // the RateLimit-Policy member
	// Label is the rule's label in the metrics: its name, or for a
	// request's limit override the server's label for them all.
	Label string
	// Aside is what the server keeps beside the limit, always its
	// limitAside (the limit's form in RLS, its metric series); the core
	// never reads it. Its type is not named here because its parts' types
	// are the RLS adapter's and the metrics', which import this package.
	Aside any
}

// CheckedAs is how the server checks every rule, whatever the config says
// of it.
type CheckedAs struct {
	Shadow bool // every rule in shadow mode: Settings.Shadow
	// Count charges every gate rule as envoyproxy/ratelimit counts,
	// sluice.ChargeCount: Settings.ChargePerDescriptor. A leased rule
	// stays a gate: its holder decides on its share, which denied hits
	// must not spend.
	Count bool
}

// NewLimit prepares r, as as says, with prepare (the Limiter's Prepare),
// and what a response says of it.
func NewLimit(r sluice.Rule, as CheckedAs, prepare func(sluice.Rule) (*sluice.PreparedRule, error)) (*Limit, error) {
	checked := r
	checked.Shadow = r.Shadow || as.Shadow
	if as.Count && r.Charge == sluice.ChargeGate && !r.Lease.Enabled {
		checked.Charge = sluice.ChargeCount
	}
	p, err := prepare(checked)
	if err != nil {
		return nil, err
	}
	l := &Limit{Rule: p, Declared: r, Label: r.Name, JSONName: fields.JSONString(r.Name)}
	l.SF, l.Policy = policyOf(r)
	return l, nil
}

// policyOf returns a rule's name as an RFC 8941 string and its
// RateLimit-Policy member. The config allows UTF-8 names, which an
// sf-string cannot hold: their other bytes are written as %XX.
func policyOf(r sluice.Rule) (sf, member string) {
	if sf, member, err := fields.Policy(&r); err == nil {
		return sf, member
	}
	var b strings.Builder
	for i := 0; i < len(r.Name); i++ {
		if c := r.Name[i]; c < 0x20 || c > 0x7e {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	ascii := r
	ascii.Name = b.String()
	sf, member, _ = fields.Policy(&ascii) // printable ASCII now
	return sf, member
}

// Overrides keeps the limits made for requests' limit overrides, one per
// limit, at most a bound of them, the least recently used dropped first.
// Dropping one loses no count: the store keeps a key's state under the
// rule's name and limit, which a rule made again for the same override
// has. It is safe for concurrent use.
type Overrides struct {
	max   int
	make  func(sluice.Rule) (*Limit, error)
	mu    sync.Mutex                     // guards what follows
	byLim map[sluice.Limit]*list.Element // of *Limit
	lru   list.List                      // most recently used first
}

// NewOverrides keeps at most max override limits, each made by make
// (NewLimit, and what the server keeps beside it).
func NewOverrides(max int, make func(sluice.Rule) (*Limit, error)) *Overrides {
	return &Overrides{max: max, make: make, byLim: map[sluice.Limit]*list.Element{}}
}

// Get returns the limit for an override of l: a fixed window, as
// envoyproxy/ratelimit counts every limit, named for the limit so that
// it never shares a key's state with a config's rule or with an override
// of another limit. field names the override in the error, a *BadRequest
// for a limit the store cannot hold.
func (o *Overrides) Get(field string, l sluice.Limit) (*Limit, error) {
	o.mu.Lock()
	if e := o.byLim[l]; e != nil {
		o.lru.MoveToFront(e)
		o.mu.Unlock()
		return e.Value.(*Limit), nil
	}
	o.mu.Unlock()

	// Made outside the lock: preparing the rule and the fields take a
	// little work, and a rule made twice by two requests at once is only
	// made twice.
	r := sluice.Rule{Name: overrideName(l), Algorithm: sluice.AlgoFixedWindow, Limit: l, Failure: sluice.FailOpen}
	li, err := o.make(r)
	if err != nil {
		return nil, Badf("%s: the store cannot hold %s: %v", field, LimitString(l), err)
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.byLim[l]; e != nil { // made meanwhile
		o.lru.MoveToFront(e)
		return e.Value.(*Limit), nil
	}
	o.byLim[l] = o.lru.PushFront(li)
	for o.lru.Len() > o.max {
		old := o.lru.Back()
		o.lru.Remove(old)
		delete(o.byLim, old.Value.(*Limit).Declared.Limit)
	}
	return li, nil
}

// Len is how many override limits are kept.
func (o *Overrides) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lru.Len()
}

// overrideName names the rule of an override of l, "{override 10/1m}".
// A config's names hold no braces, so no config rule can share it.
func overrideName(l sluice.Limit) string { return "{override " + LimitString(l) + "}" }

// LimitString is "10/1s burst 20", with sluice demo's durations (1m, not
// 1m0s).
func LimitString(l sluice.Limit) string {
	s := fmt.Sprintf("%d/%s", l.Rate, sim.FmtDur(l.Period))
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}
