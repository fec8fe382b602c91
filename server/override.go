package server

import (
	"container/list"
	"sync"
	"time"

	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice"
)

// Bounds on a request's limit override (Envoy's descriptor limit).
const (
	// MaxOverrideRequests is the largest requests_per_unit an override
	// may ask for: a billion per unit is no limit at all, and more is a
	// mistake in the route's metadata.
	MaxOverrideRequests = 1_000_000_000
	// MaxOverridePeriod is the longest period an override may ask for,
	// its unit times its unit_multiplier: a year, the longest unit.
	MaxOverridePeriod = 365 * 24 * time.Hour
	// MaxOverrideRules is how many override rules (one per rate and
	// period asked for) the server keeps prepared; past it the least
	// recently used is dropped, so that a flood of distinct overrides
	// cannot grow memory. Dropping one loses no count: the store keeps
	// a key's state under the rule's name and limit, which a rule made
	// again for the same override has.
	MaxOverrideRules = 1024
)

// labelOverride is the rule label under which every override's decisions
// are counted: the rates come from requests, so they make no label.
const labelOverride = "(override)"

// overrideUnits are the lengths of the units an override may name, as the
// config reads them (a month is 30 days, a year 365) and as
// envoyproxy/ratelimit divides time by them.
var overrideUnits = map[typepb.RateLimitUnit]time.Duration{
	typepb.RateLimitUnit_SECOND: time.Second,
	typepb.RateLimitUnit_MINUTE: time.Minute,
	typepb.RateLimitUnit_HOUR:   time.Hour,
	typepb.RateLimitUnit_DAY:    24 * time.Hour,
	typepb.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typepb.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overrideLimit checks an override's values and returns its limit. field
// names the override in the error, a *badRequest.
func overrideLimit(field string, rate uint32, unit typepb.RateLimitUnit, mult *uint32) (sluice.Limit, error) {
	switch {
	case rate == 0:
		return sluice.Limit{}, badf("%s.requests_per_unit: must be at least 1", field)
	case rate > MaxOverrideRequests:
		return sluice.Limit{}, badf("%s.requests_per_unit: %d is more than the most allowed, %d", field, rate, MaxOverrideRequests)
	}
	d, ok := overrideUnits[unit]
	if !ok {
		return sluice.Limit{}, badf("%s.unit: %v is not a unit; want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", field, unit)
	}
	k := uint32(1)
	if mult != nil {
		if k = *mult; k == 0 {
			return sluice.Limit{}, badf("%s.unit_multiplier: must be at least 1", field)
		}
	}
	if time.Duration(k) > MaxOverridePeriod/d {
		return sluice.Limit{}, badf("%s.unit_multiplier: %d %v makes a period longer than a year", field, k, unit)
	}
	return sluice.Limit{Rate: int64(rate), Period: time.Duration(k) * d}, nil
}

// overrideRules keeps the rules made for limit overrides, one per limit,
// at most MaxOverrideRules of them, the least recently used dropped first.
// It is safe for concurrent use.
type overrideRules struct {
	max     int
	as      checkedAs                                       // Settings.Shadow, Settings.ChargePerDescriptor
	prepare func(sluice.Rule) (*sluice.PreparedRule, error) // the Limiter's Prepare
	mu      sync.Mutex                                      // guards what follows
	byLim   map[sluice.Limit]*list.Element                  // of *limitInfo
	lru     list.List                                       // most recently used first
}

func newOverrideRules(max int, as checkedAs, prepare func(sluice.Rule) (*sluice.PreparedRule, error)) *overrideRules {
	return &overrideRules{max: max, as: as, prepare: prepare, byLim: make(map[sluice.Limit]*list.Element)}
}

// get returns the rule for an override of limit l: a fixed window, as
// envoyproxy/ratelimit counts every limit, named for the limit so that
// it never shares a key's state with a config's rule or with an override
// of another limit. The error is a *badRequest for a limit the store
// cannot hold.
func (o *overrideRules) get(field string, l sluice.Limit) (*limitInfo, error) {
	o.mu.Lock()
	if e := o.byLim[l]; e != nil {
		o.lru.MoveToFront(e)
		o.mu.Unlock()
		return e.Value.(*limitInfo), nil
	}
	o.mu.Unlock()

	// Made outside the lock: preparing the rule and the fields take a
	// little work, and a rule made twice by two requests at once is only
	// made twice.
	r := sluice.Rule{Name: overrideName(l), Algorithm: sluice.AlgoFixedWindow, Limit: l, Failure: sluice.FailOpen}
	li, err := newLimitInfo(r, o.as, o.prepare)
	if err != nil {
		return nil, badf("%s: the store cannot hold %s: %v", field, limitString(l), err)
	}
	li.label = labelOverride

	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.byLim[l]; e != nil { // made meanwhile
		o.lru.MoveToFront(e)
		return e.Value.(*limitInfo), nil
	}
	o.byLim[l] = o.lru.PushFront(li)
	for o.lru.Len() > o.max {
		old := o.lru.Back()
		o.lru.Remove(old)
		delete(o.byLim, old.Value.(*limitInfo).rule.Rule().Limit)
	}
	return li, nil
}

// len is how many override rules are kept.
func (o *overrideRules) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lru.Len()
}

// overrideName names the rule of an override of l, "{override 10/1m}".
// A config's names hold no braces, so no config rule can share it.
func overrideName(l sluice.Limit) string { return "{override " + limitString(l) + "}" }
