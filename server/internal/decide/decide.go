package decide

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// A Decider decides requests with its Limiter, as the server's settings
// say. Its fields are set once, before the first request.
type Decider struct {
	Limiter   *sluice.Limiter
	Overrides *Overrides // the limits of requests' limit overrides
	// Shadow, QuotaMode and ChargePerDescriptor are the server's
	// settings of those names.
	Shadow, QuotaMode, ChargePerDescriptor bool
}

// An Outcome is the answer to a request, and what it took to reach it.
type Outcome struct {
	Allowed  bool
	Statuses []Status // one per descriptor
	Fields   Fields   // the RateLimit fields and Retry-After
	// Violated names the enforced limits that denied, as JSON strings,
	// when the request is denied.
	Violated []string
	// UnknownDomain says the config has no such domain: nothing applied,
	// and the request is allowed, as envoyproxy/ratelimit answers.
	UnknownDomain bool
	// Checks are the limits applied, descriptor by descriptor, and
	// Decisions each one's decision.
	Checks    []Check
	Decisions []sluice.Decision
	// StoreErr is the store's failure, when the failure modes decided;
	// UsageLost says the usage charges among Checks were not recorded.
	StoreErr  error
	UsageLost bool
	scr       scratch
}

// The results of one limit's decision, as the server's metrics label them
// (sluice_decisions_total's result) and the console reads them: allowed,
// denied, and denied in shadow mode, which does not enforce it.
const (
	ResultWithin     = "within"
	ResultOver       = "over"
	ResultShadowOver = "shadow_over"
)

// scratch is room for the working slices of a usual request (one
// descriptor, two limits), in its outcome: deciding it takes one
// allocation for them all, not one per slice. A larger request takes
// more.
type scratch struct {
	checks   [2]Check
	ds       [2]sluice.Decision // each check's decision
	sc       [2]sluice.Check    // the store's checks (take)
	statuses [1]Status
}

// A Status is the answer for one descriptor.
type Status struct {
	Over      bool // an enforced limit of its own denied it
	Unlimited bool // explicitly not limited
	// Limit is the limit reported, with D its remaining and reset: of
	// the limits that applied, the first in config order that denied,
	// else the first with the least remaining, over the config's own
	// shadow modes. D's Allowed and RetryAfter are the descriptor's, all
	// its limits' together. nil when no limit applied. Named says whether the config names it
	// (config.Match.Name).
	Limit *Limit
	D     sluice.Decision
	Named bool
	// Rule is the rule's name of an unlimited descriptor.
	Rule string
	// Secret marks the entries that land on a descriptor the config
	// marks secret (config.Config.MatchSecrets), bit i for entry i:
	// shown, they show their digest, as config.Config.Redacted does.
	Secret uint64
	// Meta is the config's metadata of the descriptor it lands on, nil if
	// none; shared with the config: do not modify.
	Meta map[string]any
}

// A Check is one limit applied to one descriptor of a request.
type Check struct {
	Desc  int // the descriptor's index in the request
	Limit *Limit
	Hits  int64 // the descriptor's hits: 0 peeks
	Key   string
	Label string // config.Match.MetricLabel: value_to_metric's, or ""
	// StatPath is config.Match.StatPath; "" for a limit override, which
	// the config does not name.
	StatPath string
	// Detailed is config.Match.DetailedMetric.
	Detailed bool
	Named    bool // the config names the limit (config.Match.Name)
}

// Decide answers req against cfg, whose rules limits holds prepared (by
// config.Match.ID). The error is a *BadRequest for a request of the wrong
// shape, which changes nothing; the context's; or the store's refusal of
// the request as given (sluice.ErrRefused).
func (dc *Decider) Decide(ctx context.Context, cfg *config.Config, limits []*Limit, req *Request) (*Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	out := new(Outcome)
	// Match every descriptor first: a request is decided whole or not at
	// all. A descriptor with a limit override is not matched: as in
	// envoyproxy/ratelimit, its override is its one limit, in place of
	// whatever the config says of it (limits, unlimited, shadow_mode,
	// quota_mode, replaces, metadata), in a domain the config has.
	matches := make([][]config.Match, len(req.Descs))
	// Each descriptor's secret entries, found by the walk that matches it.
	var secretBuf [1]uint64
	secret := room(secretBuf[:0], len(req.Descs))
	var overrides []Check // one per descriptor with an override
	for i := range req.Descs {
		d := &req.Descs[i]
		var ms []config.Match
		var key string
		var err error
		if d.Override == nil {
			ms, secret[i], err = cfg.MatchSecrets(req.Domain, d.Entries)
		} else {
			key, secret[i], err = cfg.KeySecrets(req.Domain, d.Entries)
		}
		if err != nil {
			// An unknown domain: OK, no limit applied, as
			// envoyproxy/ratelimit answers.
			out.UnknownDomain = true
			clear(matches)
			clear(secret)
			overrides = nil
			break
		}
		matches[i] = ms
		if d.Override != nil {
			li, err := dc.Overrides.Get(DescField(i).String()+".limit", *d.Override)
			if err != nil {
				return nil, err
			}
			overrides = append(overrides, Check{Desc: i, Limit: li, Hits: d.Hits, Key: BoundKey(key)})
		}
	}
	config.ApplyReplaces(matches)

	checks := out.scr.checks[:0]
	for i, ms := range matches {
		if len(overrides) > 0 && overrides[0].Desc == i {
			checks = append(checks, overrides[0])
			overrides = overrides[1:]
			continue
		}
		for _, m := range ms {
			if !m.Unlimited {
				checks = append(checks, Check{Desc: i, Limit: limits[m.ID], Hits: req.Descs[i].Hits, Key: BoundKey(m.Key), Label: m.MetricLabel, StatPath: m.StatPath, Detailed: m.DetailedMetric, Named: m.Name != ""})
			}
		}
	}
	ds := room(out.scr.ds[:0], len(checks))
	quota := dc.quotaDescriptors(matches)
	res, err := dc.takeAll(ctx, out, checks, len(req.Descs), quota, ds)
	if err != nil {
		return nil, err
	}
	out.Checks, out.Decisions, out.StoreErr = checks, ds, res.Err
	out.Allowed, out.Statuses = res.Allowed, room(out.scr.statuses[:0], len(req.Descs))
	// The request's decision is the descriptor's when it has one
	// descriptor and one limit, checked as the config declares it: no
	// second combining.
	same := len(req.Descs) == 1 && len(checks) == 1 && quota == nil && !dc.ChargePerDescriptor &&
		checks[0].Limit.Rule.Shadow() == checks[0].Limit.Declared.Shadow
	for i, j := 0, 0; i < len(req.Descs); i++ {
		first := j
		for j < len(checks) && checks[j].Desc == i {
			j++
		}
		st := &out.Statuses[i]
		switch {
		case first == j && len(matches[i]) > 0 && matches[i][0].Unlimited:
			*st = Status{Unlimited: true, Rule: matches[i][0].Rule.Name}
		case first == j:
			*st = Status{}
		case same:
			*st = Status{Over: !res.Allowed, Limit: checks[0].Limit, Named: checks[0].Named, D: res.Decision}
		default:
			d, t := combineDeclared(checks[first:j], ds[first:j])
			*st = Status{Over: !d.Allowed, Limit: checks[first+t].Limit, Named: checks[first+t].Named, D: d}
		}
		if len(matches[i]) > 0 {
			st.Meta = matches[i][0].Metadata // the same for all: one descriptor's
		}
		st.Secret = secret[i]
	}
	var fieldBuf [96]byte // makeFields copies out of it: it stays on the stack
	out.Fields = makeFields(fieldBuf[:0], checks, ds, res.Decision, res.Err)
	if !out.Allowed {
		for j := range checks {
			if li := checks[j].Limit; !ds[j].Allowed && !li.Rule.Shadow() && !slices.Contains(out.Violated, li.JSONName) {
				out.Violated = append(out.Violated, li.JSONName)
			}
		}
	}
	return out, nil
}

// combineDeclared is sluice.Combine over one descriptor's checks, each in
// shadow mode as the config declares its rule (global shadow mode aside:
// under it a descriptor over its limit says so while the request is
// allowed, as in envoyproxy/ratelimit), and the index of the check it
// reports. The limit reported, its remaining and its reset, is one limit,
// so that a status never pairs one limit's name with another's reset: the
// first in config order that denied, else the first with the least
// remaining.
func combineDeclared(cs []Check, ds []sluice.Decision) (sluice.Decision, int) {
	enforced := slices.ContainsFunc(cs, func(c Check) bool { return !c.Limit.Declared.Shadow })
	c, t := sluice.Decision{Allowed: true}, -1
	denied := false // ds[t] denied
	for k := range cs {
		if enforced && cs[k].Limit.Declared.Shadow {
			continue
		}
		d := &ds[k]
		if enforced { // shadow alone: reported, never denied
			c.Allowed = c.Allowed && d.Allowed
			c.RetryAfter = max(c.RetryAfter, d.RetryAfter)
		}
		switch {
		case denied:
		case !d.Allowed:
			t, denied = k, true
		case t < 0 || d.Remaining < ds[t].Remaining:
			t = k
		}
	}
	c.Limit, c.Remaining, c.ResetAfter = ds[t].Limit, ds[t].Remaining, ds[t].ResetAfter
	if c.Allowed {
		c.RetryAfter = 0
	}
	return c, t
}

// Take decides the checks in one Limiter.Take, writing check j's
// decision to ds[j]. The error is the context's, a request whose hits add
// up past MaxCost, or the store's refusal (sluice.ErrRefused); a store
// that failed is in the result's Err, the failure modes having decided.
//
// Each check costs its descriptor's hits (Check.Cost), all-or-nothing
// across the gates' costs; a descriptor whose hits are 0 is a check,
// charging nothing (Check.Peek: a peek on a gate). Descriptors that come
// to the same limit and key are one check costing their hits together (a
// store may refuse a key named twice in one request, as Redis does), and
// each of them reports its decision.
func (dc *Decider) Take(ctx context.Context, checks []Check, ds []sluice.Decision) (sluice.Result, error) {
	return dc.take(ctx, checks, ds, nil)
}

// take is Take with room for the store's checks in buf, when not nil.
func (dc *Decider) take(ctx context.Context, checks []Check, ds []sluice.Decision, buf []sluice.Check) (sluice.Result, error) {
	if len(checks) == 0 {
		return sluice.Result{Decision: sluice.Decision{Allowed: true}}, nil
	}
	sc := buf[:0]
	at := make([]int, len(checks)) // check j is decided as sc[at[j]]
	for j := range checks {
		c := sluice.Check{Rule: checks[j].Limit.Rule, Key: checks[j].Key, Cost: checks[j].Hits, Peek: checks[j].Hits == 0}
		at[j] = slices.IndexFunc(sc, func(d sluice.Check) bool { return d.Rule == c.Rule && d.Key == c.Key })
		if at[j] < 0 {
			at[j] = len(sc)
			sc = append(sc, c)
			continue
		}
		// Each cost is at most MaxCost and a request has at most
		// MaxDescriptors of them: the sum cannot overflow.
		f := &sc[at[j]]
		if f.Cost += c.Cost; f.Cost > MaxCost {
			return sluice.Result{}, Badf("%s.hits_addend: the descriptors that come to limit %q and one key add up to more than 2^53 hits",
				DescField(checks[j].Desc), checks[j].Limit.Rule.Name())
		}
		f.Peek = f.Cost == 0
	}
	// With no check folded into another, the store's decisions are the
	// checks' own: it writes them to ds.
	var into []sluice.Decision
	if len(sc) == len(checks) {
		into = ds[:0]
	}
	res, err := dc.Limiter.Take(ctx, sc, into)
	if err != nil {
		return sluice.Result{}, err
	}
	for j := range checks {
		ds[j] = res.Decisions[at[j]]
	}
	return res, nil
}

// quotaDescriptors says which descriptors of a request are in quota mode,
// as envoyproxy/ratelimit tells them: under global quota mode
// (Settings.QuotaMode) every descriptor but the unlimited ones, those no
// limit applies to included; otherwise those whose limits the config puts
// in quota_mode. It is nil when none is.
func (dc *Decider) quotaDescriptors(matches [][]config.Match) []bool {
	var quota []bool
	for i, ms := range matches {
		q := dc.QuotaMode
		for _, m := range ms {
			if m.Unlimited {
				q = false
				break
			}
			q = q || m.QuotaMode
		}
		if q {
			if quota == nil {
				quota = make([]bool, len(matches))
			}
			quota[i] = true
		}
	}
	return quota
}

// takeAll decides the checks of a request of ndesc descriptors as take
// does, all-or-nothing among the limits charged as gates, but for the
// descriptors in quota mode (quota[i], nil for none) and, under
// ChargePerDescriptor, every descriptor, which are decided each on its
// own:
//
//   - all-or-nothing (the default): an enforced limit of a descriptor not
//     in quota mode denies, and the request is denied with no gate
//     charged;
//   - a descriptor in quota mode, or any under ChargePerDescriptor, with
//     an enforced limit that denies is over: it is left out of the
//     request, its gates not charged, and reports its denial, and the
//     rest of the request is taken again without it;
//   - the request is denied when a descriptor not in quota mode is over,
//     or every descriptor in quota mode is (as envoyproxy/ratelimit
//     decides), and may retry when all the first kind and one of the
//     second would be allowed.
//
// A limit charged by usage (sluice.ChargeUsage, or ChargeCount, which
// ChargePerDescriptor makes of every gate) is recorded by the first take,
// over or not, and left out of the takes again: it is charged once. So
// under ChargePerDescriptor, where every limit is, a request is taken
// once and every descriptor is charged, over or not, as
// envoyproxy/ratelimit does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// false. Otherwise the gates of one descriptor, and descriptors that come
// to one limit and key, are charged together or not at all. The request
// is taken at most once more per descriptor found over; a descriptor
// found over is not charged even if, by the time the request is taken
// again, another request has made room under its limit.
//
// When the first take, the one with the usage charges, finds the store
// failed, out.UsageLost says so.
func (dc *Decider) takeAll(ctx context.Context, out *Outcome, checks []Check, ndesc int, quota []bool, ds []sluice.Decision) (sluice.Result, error) {
	each := dc.ChargePerDescriptor
	if quota == nil && !each {
		res, err := dc.take(ctx, checks, ds, out.scr.sc[:0])
		out.UsageLost = err == nil && res.Err != nil
		return res, err
	}
	isQuota := func(d int) bool { return quota != nil && quota[d] }
	left := 0 // quota descriptors not found over
	for d := range ndesc {
		if isQuota(d) {
			left++
		}
	}
	over := make([]bool, ndesc)
	active := checks
	at := make([]int, len(checks)) // active[k] is checks[at[k]]
	for j := range at {
		at[j] = j
	}
	var storeErr error
	first := true
	for len(active) > 0 {
		sub := make([]sluice.Decision, len(active))
		res, err := dc.take(ctx, active, sub, out.scr.sc[:0])
		if err != nil {
			return res, err
		}
		if res.Err != nil && first {
			out.UsageLost = true // the take with the usage charges
		}
		first = false
		if storeErr == nil {
			storeErr = res.Err
		}
		res.Err = storeErr
		for k := range active {
			ds[at[k]] = sub[k]
		}
		if res.Allowed {
			break
		}
		for k := range active {
			if sub[k].Allowed || active[k].Limit.Rule.Shadow() {
				continue
			}
			d := active[k].Desc
			if !each && !isQuota(d) {
				return res, nil // all or nothing: a limit not in quota mode denied
			}
			if !over[d] {
				over[d] = true
				if isQuota(d) {
					left--
				}
			}
		}
		if !each && left == 0 {
			break // every quota descriptor is over: denied, nothing charged
		}
		var kept []Check
		at = at[:0]
		for j := range checks {
			if !over[checks[j].Desc] && checks[j].Limit.Rule.Rule().Charge == sluice.ChargeGate {
				kept = append(kept, checks[j])
				at = append(at, j)
			}
		}
		active = kept
	}
	return sluice.Result{Decision: verdict(checks, ds, over, quota, left), Decisions: ds, Err: storeErr}, nil
}

// verdict is the decision on a request whose descriptors found over are
// over[i], left of its quota descriptors (quota[i]) not being over: see
// takeAll. Its Limit, Remaining and ResetAfter are sluice.Combine's over
// every check.
func verdict(checks []Check, ds []sluice.Decision, over, quota []bool, left int) sluice.Decision {
	own := make([]sluice.Check, len(checks))
	for j := range checks {
		own[j] = sluice.Check{Rule: checks[j].Limit.Rule}
	}
	v := sluice.Combine(own, ds)
	// Each descriptor over waits for the longest of its denials.
	wait := make(map[int]time.Duration)
	for j := range checks {
		if d := checks[j].Desc; over[d] && !ds[j].Allowed && !checks[j].Limit.Rule.Shadow() {
			wait[d] = max(wait[d], ds[j].RetryAfter)
		}
	}
	var retry time.Duration    // for every descriptor not in quota mode
	quotaRetry := sluice.Never // for the first quota descriptor
	denied := false
	for d, w := range wait {
		if quota != nil && quota[d] {
			quotaRetry = min(quotaRetry, w)
			continue
		}
		retry, denied = max(retry, w), true
	}
	if quota != nil && left == 0 {
		retry, denied = max(retry, quotaRetry), true
	}
	v.Allowed, v.RetryAfter = !denied, 0
	if denied {
		v.RetryAfter = retry
	}
	return v
}
