package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// A request is what the server decides, whatever protocol brought it:
// gRPC and POST /json build it from a RateLimitRequest (rls.go), forward
// auth from an HTTP request (auth.go).
type request struct {
	domain string
	descs  []descriptor
	// room for the descriptors and entries of a usual request, so that
	// building one takes one allocation
	descBuf  [1]descriptor
	entryBuf [2]config.Entry
}

// A descriptor is one request descriptor: its entries, what it costs, and
// the limit it brings, if any.
type descriptor struct {
	entries []config.Entry
	hits    int64 // 0: a check, charging nothing; at most MaxCost
	// override, when set, is the limit the request asks for in place of
	// the config's (Envoy's limit override): checked, within the bounds
	// of override.go.
	override *sluice.Limit
}

// An outcome is the answer to a request.
type outcome struct {
	allowed  bool
	statuses []descStatus // one per descriptor
	fields   rlFields     // the RateLimit fields and Retry-After
	// violated names the enforced limits that denied, as JSON strings,
	// when the request is denied.
	violated []string
	scr      scratch
}

// scratch is room for the working slices of a usual request (one
// descriptor, two limits), in its outcome: deciding it takes one
// allocation for them all, not one per slice. A larger request takes
// more.
type scratch struct {
	checks   [2]check
	ds       [2]sluice.Decision // each check's decision
	sc       [2]sluice.Check    // the store's checks (take)
	own      [2]sluice.Check    // the checks of the config's own rules (decide)
	statuses [1]descStatus
}

// room returns buf[:n] when it has room for n, else a new slice.
func room[T any](buf []T, n int) []T {
	if n <= cap(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

// A descStatus is the answer for one descriptor.
type descStatus struct {
	over      bool // an enforced limit of its own denied it
	unlimited bool // explicitly not limited
	// lim is the limit reported, with its decision d: of the limits that
	// applied, the one with the least remaining, as sluice.Combine
	// reports a request's limits. nil when no limit applied. named says
	// whether the config names it (config.Match.Name).
	lim   *limitInfo
	d     sluice.Decision
	named bool
	// meta is the config's metadata of the descriptor it lands on, nil
	// if none; shared with the config: do not modify.
	meta map[string]any
}

// badRequest is a request the server refuses without deciding or
// charging anything: gRPC InvalidArgument, HTTP 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// check is one limit applied to one descriptor of a request.
type check struct {
	desc  int // the descriptor's index in the request
	lim   *limitInfo
	n     int64 // the descriptor's hits
	key   string
	label string // config.Match.MetricLabel: value_to_metric's, or ""
	named bool   // the config names the limit (config.Match.Name)
}

// decide answers req against snap, and counts it: see the package
// documentation. The error is a *badRequest for a request of the wrong
// shape, which changes nothing; the context's; or the store's refusal of
// the request as given (sluice.ErrRefused).
func (s *Server) decide(ctx context.Context, snap *snapshot, req *request, endpoint endpoint) (*outcome, error) {
	start := time.Now()
	out := new(outcome)
	defer func() { s.m.observe(endpoint, time.Since(start)) }()
	if err := req.validate(); err != nil {
		return nil, err
	}
	// Match every descriptor first: a request is decided whole or not at
	// all. A descriptor with a limit override is not matched: as in
	// envoyproxy/ratelimit, its override is its one limit, in place of
	// whatever the config says of it (limits, unlimited, shadow_mode,
	// quota_mode, replaces, metadata), in a domain the config has.
	domain := req.domain
	matches := make([][]config.Match, len(req.descs))
	var overrides []check // one per descriptor with an override
	for i := range req.descs {
		d := &req.descs[i]
		var ms []config.Match
		var key string
		var err error
		if d.override == nil {
			ms, err = snap.cfg.Match(req.domain, d.entries)
		} else {
			key, err = snap.cfg.Key(req.domain, d.entries)
		}
		if err != nil {
			// An unknown domain: OK, no limit applied, as
			// envoyproxy/ratelimit answers.
			domain = labelUnknownDomain
			clear(matches)
			overrides = nil
			break
		}
		matches[i] = ms
		if d.override != nil {
			li, err := s.overrides.get(descField(i).String()+".limit", *d.override)
			if err != nil {
				return nil, err
			}
			overrides = append(overrides, check{desc: i, lim: li, n: d.hits, key: boundKey(key)})
		}
	}
	config.ApplyReplaces(matches)

	checks := out.scr.checks[:0]
	for i, ms := range matches {
		if len(overrides) > 0 && overrides[0].desc == i {
			checks = append(checks, overrides[0])
			overrides = overrides[1:]
			continue
		}
		for _, m := range ms {
			if !m.Unlimited {
				checks = append(checks, check{desc: i, lim: snap.rules[m.ID], n: req.descs[i].hits, key: boundKey(m.Key), label: m.MetricLabel, named: m.Name != ""})
			}
		}
	}
	ds := room(out.scr.ds[:0], len(checks))
	res, err := s.takeAll(ctx, domain, checks, len(req.descs), s.quotaDescriptors(matches), ds, &out.scr)
	if err != nil {
		return nil, err
	}
	switch {
	case res.Err == nil:
	case errors.Is(res.Err, sluice.ErrShed):
		// Load, not failure: denied, whatever the failure modes say.
		s.m.countShed(domain)
	default:
		s.m.storeErrors.Inc()
		s.failures.note(ctx, s.log, s.cfg.Clock.Now(), domain, res.Err)
	}
	out.allowed, out.statuses = res.Allowed, room(out.scr.statuses[:0], len(req.descs))
	// Each descriptor's status is decided over its limits as the config
	// sets their shadow modes: one slice for the request, cut per
	// descriptor.
	own := room(out.scr.own[:0], len(checks))
	for j := range checks {
		own[j] = sluice.Check{Rule: checks[j].lim.cfgRule}
	}
	for i, j := 0, 0; i < len(req.descs); i++ {
		first := j
		for j < len(checks) && checks[j].desc == i {
			j++
		}
		out.statuses[i] = s.describe(domain, matches[i], checks[first:j], own[first:j], ds[first:j])
		if len(matches[i]) > 0 {
			out.statuses[i].meta = matches[i][0].Metadata // the same for all: one descriptor's
		}
	}
	var fieldBuf [96]byte // makeFields copies out of it: it stays on the stack
	out.fields = makeFields(fieldBuf[:0], checks, ds, res.Decision, res.Err)
	if !out.allowed {
		for j := range checks {
			if li := checks[j].lim; !ds[j].Allowed && !li.rule.Shadow() && !slices.Contains(out.violated, li.jsonName) {
				out.violated = append(out.violated, li.jsonName)
			}
		}
	}
	return out, nil
}

// describe answers one descriptor from the decisions of its limits, and
// counts them; own[k] is cs[k] as a check of the config's rule. Its status is sluice.Combine's decision over the limits'
// own shadow modes, as the config sets them: under global shadow mode
// (Settings.Shadow) a descriptor over its limit says so while the request
// is allowed, as in envoyproxy/ratelimit.
func (s *Server) describe(domain string, ms []config.Match, cs []check, own []sluice.Check, ds []sluice.Decision) descStatus {
	if len(cs) == 0 {
		if len(ms) > 0 && ms[0].Unlimited {
			s.m.countUnruled(domain, ms[0].Rule.Name)
			return descStatus{unlimited: true}
		}
		s.m.countUnruled(domain, labelNoRule)
		return descStatus{}
	}
	for k := range cs {
		c, d := &cs[k], &ds[k]
		result := resultWithin
		if !d.Allowed {
			result = resultOver
			if c.lim.cfgRule.Shadow() || s.cfg.Shadow {
				result = resultShadowOver
			}
		}
		s.m.count(c.lim, domain, result)
		if c.label != "" {
			s.m.countValue(c.lim, domain, c.label, result)
		}
	}
	comb := sluice.Combine(own, ds)
	t := &cs[sluice.Tightest(own, ds)]
	return descStatus{over: !comb.Allowed, lim: t.lim, named: t.named, d: comb}
}

// take decides the checks in one Limiter.Take, writing check j's
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
func (s *Server) take(ctx context.Context, checks []check, ds []sluice.Decision, scr *scratch) (sluice.Result, error) {
	if len(checks) == 0 {
		return sluice.Result{Decision: sluice.Decision{Allowed: true}}, nil
	}
	sc := scr.sc[:0]
	at := make([]int, len(checks)) // check j is decided as sc[at[j]]
	for j := range checks {
		c := sluice.Check{Rule: checks[j].lim.rule, Key: checks[j].key, Cost: checks[j].n, Peek: checks[j].n == 0}
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
			return sluice.Result{}, badf("%s.hits_addend: the descriptors that come to limit %q and one key add up to more than 2^53 hits",
				descField(checks[j].desc), checks[j].lim.rule.Name())
		}
		f.Peek = f.Cost == 0
	}
	// With no check folded into another, the store's decisions are the
	// checks' own: it writes them to ds.
	var into []sluice.Decision
	if len(sc) == len(checks) {
		into = ds[:0]
	}
	res, err := s.limiter.Take(ctx, sc, into)
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
func (s *Server) quotaDescriptors(matches [][]config.Match) []bool {
	var quota []bool
	for i, ms := range matches {
		q := s.cfg.QuotaMode
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

// takeAll decides the checks of a request of ndesc descriptors in domain
// as take does, all-or-nothing among the limits charged as gates, but for
// the descriptors in quota mode (quota[i], nil for none) and, under
// Settings.ChargePerDescriptor, every descriptor, which are decided each on
// its own:
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
// Usage charges the store failed to record are counted in
// sluice_usage_charges_lost_total.
func (s *Server) takeAll(ctx context.Context, domain string, checks []check, ndesc int, quota []bool, ds []sluice.Decision, scr *scratch) (sluice.Result, error) {
	each := s.cfg.ChargePerDescriptor
	if quota == nil && !each {
		res, err := s.take(ctx, checks, ds, scr)
		if err == nil && res.Err != nil {
			s.countLost(domain, checks)
		}
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
		res, err := s.take(ctx, active, sub, scr)
		if err != nil {
			return res, err
		}
		if res.Err != nil && first {
			s.countLost(domain, checks) // the take with the usage charges
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
			if sub[k].Allowed || active[k].lim.rule.Shadow() {
				continue
			}
			d := active[k].desc
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
		var kept []check
		at = at[:0]
		for j := range checks {
			if !over[checks[j].desc] && checks[j].lim.rule.Rule().Charge == sluice.ChargeGate {
				kept = append(kept, checks[j])
				at = append(at, j)
			}
		}
		active = kept
	}
	return sluice.Result{Decision: verdict(checks, ds, over, quota, left), Decisions: ds, Err: storeErr}, nil
}

// countLost counts the usage charges among checks, which a store that
// failed did not record: each check of cost > 0 on a limit charged by
// usage.
func (s *Server) countLost(domain string, checks []check) {
	for j := range checks {
		if li := checks[j].lim; li.rule.Rule().Charge != sluice.ChargeGate && checks[j].n > 0 {
			s.m.lost.WithLabelValues(domain, li.label).Inc()
		}
	}
}

// verdict is the decision on a request whose descriptors found over are
// over[i], left of its quota descriptors (quota[i]) not being over: see
// takeAll. Its Limit, Remaining and ResetAfter are sluice.Combine's over
// every check.
func verdict(checks []check, ds []sluice.Decision, over, quota []bool, left int) sluice.Decision {
	own := make([]sluice.Check, len(checks))
	for j := range checks {
		own[j] = sluice.Check{Rule: checks[j].lim.rule}
	}
	v := sluice.Combine(own, ds)
	// Each descriptor over waits for the longest of its denials.
	wait := make(map[int]time.Duration)
	for j := range checks {
		if d := checks[j].desc; over[d] && !ds[j].Allowed && !checks[j].lim.rule.Shadow() {
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

// validate checks the shape every protocol shares; the adapters check
// their own fields, and bound the hits, before.
func (r *request) validate() error {
	switch {
	case r.domain == "":
		return badf("domain: must not be empty")
	case len(r.descs) == 0:
		return badf("descriptors: must not be empty")
	case len(r.descs) > MaxDescriptors:
		return badf("descriptors: %d of them; at most %d are allowed", len(r.descs), MaxDescriptors)
	}
	for i, d := range r.descs {
		f := descField(i)
		switch {
		case len(d.entries) == 0:
			return badf("%s.entries: must not be empty", f)
		case len(d.entries) > MaxEntries:
			return badf("%s.entries: %d of them; at most %d are allowed", f, len(d.entries), MaxEntries)
		}
		for k, e := range d.entries {
			if e.Key == "" {
				return badf("%s.entries[%d].key: must not be empty", f, k)
			}
		}
	}
	return nil
}

// descField names descriptor i in an error message.
type descField int

func (i descField) String() string { return fmt.Sprintf("descriptors[%d]", int(i)) }

// maxKeyLen bounds the keys handed to the store: a descriptor value can
// be a whole request path.
const maxKeyLen = 512

// boundKey returns k, or when it is long its domain and a digest of the
// rest. Keys from config.Match never hold "%#", so a digest cannot pose as
// a key.
func boundKey(k string) string {
	if len(k) <= maxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	dom, _, _ := strings.Cut(k, "|")
	if len(dom) > 128 {
		dom = ""
	}
	return dom + "|%#" + base64.RawURLEncoding.EncodeToString(sum[:18])
}
