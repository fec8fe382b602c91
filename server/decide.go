package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// badRequest is a request the server refuses without deciding or
// charging anything: gRPC InvalidArgument, HTTP 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// check is one limit applied to one descriptor of a request.
type check struct {
	desc int // the descriptor's index in the request
	lim  *limitInfo
	n    int64 // the descriptor's hits
}

// ShouldRateLimit decides req as envoy.service.ratelimit.v3's
// RateLimitService does, against the config being served: see the package
// documentation. The error is a gRPC status: InvalidArgument for a
// malformed request, which changes nothing, or the context's.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := s.decide(ctx, s.cur.Load(), req, endpointGRPC)
	if err != nil {
		var bad *badRequest
		if !errors.As(err, &bad) && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "deciding a request", "err", err) // as writeDecideError does
		}
		return nil, grpcError(err)
	}
	return resp, nil
}

// decide answers req against snap, and counts it.
func (s *Server) decide(ctx context.Context, snap *snapshot, req *rlspb.RateLimitRequest, endpoint string) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.m.observe(endpoint, time.Since(start)) }()

	hits, err := s.validate(req)
	if err != nil {
		return nil, err
	}
	descs := req.GetDescriptors()

	// Match every descriptor first: a request is decided whole or not at
	// all.
	matches := make([][]config.Match, len(descs))
	known := true
	entries := make([]config.Entry, 0, 8)
	for i, d := range descs {
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ms, err := snap.cfg.Match(req.GetDomain(), entries)
		if err != nil {
			// An unknown domain: OK, no limit applied, as
			// envoyproxy/ratelimit answers.
			known = false
			clear(matches)
			break
		}
		matches[i] = ms
	}
	domainLabel := req.GetDomain()
	if !known {
		domainLabel = labelUnknownDomain
	}
	config.ApplyReplaces(matches)

	checks := make([]check, 0, 2*len(descs))
	keys := make([]string, 0, 2*len(descs))
	for i, ms := range matches {
		for _, m := range ms {
			if m.Unlimited {
				continue
			}
			li := snap.rules[m.Rule]
			if li == nil {
				// Not listed by Rules: cannot happen with a Config from
				// package config, but a rule must never go unchecked.
				li = newLimitInfo(m.Rule, s.cfg.Shadow)
			}
			checks = append(checks, check{desc: i, lim: li, n: hits[i]})
			keys = append(keys, boundKey(m.Key))
		}
	}
	ds := make([]sluice.Decision, len(checks))
	combined, storeErr, err := s.take(ctx, checks, keys, ds)
	if err != nil {
		return nil, err
	}
	if storeErr != nil {
		s.m.storeErrors.Inc()
		s.log.DebugContext(ctx, "store failed; the rules' failure modes decided", "domain", req.GetDomain(), "err", storeErr)
	}

	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	j := 0 // checks are in descriptor order
	for i := range descs {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		first := j
		for j < len(checks) && checks[j].desc == i {
			j++
		}
		if first == j {
			if ms := matches[i]; len(ms) > 0 && ms[0].Unlimited {
				// As envoyproxy/ratelimit says it.
				st.LimitRemaining = math.MaxUint32
				s.m.decisions.WithLabelValues(domainLabel, ms[0].Rule.Name, resultWithin).Inc()
			} else {
				s.m.decisions.WithLabelValues(domainLabel, labelNoRule, resultWithin).Inc()
			}
			continue
		}
		s.describe(st, domainLabel, checks[first:j], ds[first:j])
	}
	if !combined.Allowed {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	f := makeFields(checks, ds, combined, storeErr)
	if f.policy != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: fieldPolicy, Value: f.policy})
	}
	if f.rateLimit != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: fieldRateLimit, Value: f.rateLimit})
	}
	if f.retryAfter != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: fieldRetryAfter, Value: f.retryAfter})
	}
	return resp, nil
}

// describe fills in the status of one descriptor from the decisions of
// its limits, and counts them. The descriptor is over the limit if a
// limit not in shadow mode (by the config) denied it; under global shadow
// mode it says so, while the overall answer stays OK, as in
// envoyproxy/ratelimit. The limit it reports is the one that denied with
// the longest wait, or else the one with the least remaining.
func (s *Server) describe(st *rlspb.RateLimitResponse_DescriptorStatus, domain string, cs []check, ds []sluice.Decision) {
	enforced := false
	for k := range cs {
		enforced = enforced || !cs[k].lim.shadow
	}
	over := false
	p := -1
	for k := range cs {
		c, d := &cs[k], &ds[k]
		result := resultWithin
		if !d.Allowed {
			result = resultOver
			if c.lim.shadow || s.cfg.Shadow {
				result = resultShadowOver
			}
		}
		s.m.count(c.lim, domain, result)
		if enforced && c.lim.shadow {
			continue
		}
		denied := !d.Allowed && !c.lim.shadow
		switch {
		case p < 0:
			p = k
		case denied && !over:
			p = k
		case denied && d.RetryAfter > ds[p].RetryAfter:
			p = k
		case !over && !denied && d.Remaining < ds[p].Remaining:
			p = k
		}
		over = over || denied
	}
	if over {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	d := &ds[p]
	st.CurrentLimit = cs[p].lim.current
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
	if d.ResetAfter != sluice.Never {
		st.DurationUntilReset = durationpb.New(d.ResetAfter)
	}
}

// take decides the checks, writing check j's decision to ds[j], and
// returns the combined decision and the store's error if the failure
// modes decided. The error is the context's, or the store's refusal of
// the request as given (sluice.ErrRefused: a limit outside the Redis
// store's range, say), which the client sees as Internal.
//
// The checks are decided in one Limiter.Take, all-or-nothing, each at its
// descriptor's hits (Check.Cost), so that descriptors with hits_addends
// of their own are charged together or not at all. The request's cost is
// 0: a descriptor whose hits are 0 is a peek. Descriptors that come to
// the same limit and key are one check costing their hits together (a
// store may refuse a key named twice in one request, as Redis does), and
// each of them reports its decision.
func (s *Server) take(ctx context.Context, checks []check, keys []string, ds []sluice.Decision) (sluice.Decision, error, error) {
	if len(checks) == 0 {
		return sluice.Decision{Allowed: true}, nil, nil
	}
	sc := make([]sluice.Check, 0, len(checks))
	at := make([]int, len(checks)) // check j is decided as sc[at[j]]
	for j := range checks {
		c := sluice.Check{Rule: checks[j].lim.rule, Key: keys[j], Cost: checks[j].n}
		at[j] = slices.IndexFunc(sc, func(d sluice.Check) bool { return d.Rule == c.Rule && d.Key == c.Key })
		if at[j] >= 0 {
			// Each cost is at most MaxCost and a request has at most
			// MaxDescriptors of them: the sum cannot overflow.
			if sc[at[j]].Cost += c.Cost; sc[at[j]].Cost > MaxCost {
				return sluice.Decision{}, nil, badf("%s.hits_addend: the descriptors that come to limit %q and one key add up to more than 2^53 hits",
					descField(checks[j].desc), checks[j].lim.rule.Name)
			}
			continue
		}
		at[j] = len(sc)
		sc = append(sc, c)
	}
	res, err := s.limiter.Take(ctx, 0, sc, nil)
	if err != nil {
		return sluice.Decision{}, nil, err
	}
	for j := range checks {
		ds[j] = res.Decisions[at[j]]
	}
	return res.Decision, res.Err, nil
}

// validate checks the shape of req and returns each descriptor's hits.
// Its messages name the offending field as protojson spells it.
func (s *Server) validate(req *rlspb.RateLimitRequest) ([]int64, error) {
	if req.GetDomain() == "" {
		return nil, badf("domain: must not be empty")
	}
	descs := req.GetDescriptors()
	switch {
	case len(descs) == 0:
		return nil, badf("descriptors: must not be empty")
	case len(descs) > MaxDescriptors:
		return nil, badf("descriptors: %d of them; at most %d are allowed", len(descs), MaxDescriptors)
	}
	if h := uint64(req.GetHitsAddend()); h > s.cfg.MaxHitsAddend {
		return nil, badf("hits_addend: %d is more than the most allowed, %d", h, s.cfg.MaxHitsAddend)
	}
	n := int64(max(req.GetHitsAddend(), 1)) // 0, the proto default, means 1
	hits := make([]int64, len(descs))
	for i, d := range descs {
		f := descField(i)
		es := d.GetEntries()
		switch {
		case len(es) == 0:
			return nil, badf("%s.entries: must not be empty", f)
		case len(es) > MaxEntries:
			return nil, badf("%s.entries: %d of them; at most %d are allowed", f, len(es), MaxEntries)
		case d.GetLimit() != nil:
			return nil, badf("%s.limit: sluice does not take limit overrides from the request; limits come from its config", f)
		case d.GetIsNegativeHits():
			return nil, badf("%s.is_negative_hits: sluice does not give hits back", f)
		}
		for k, e := range es {
			if e.GetKey() == "" {
				return nil, badf("%s.entries[%d].key: must not be empty", f, k)
			}
		}
		hits[i] = n
		if h := d.GetHitsAddend(); h != nil {
			// A descriptor's own hits_addend wins, and may be 0: a
			// check that charges nothing.
			if h.GetValue() > s.cfg.MaxHitsAddend {
				return nil, badf("%s.hits_addend: %d is more than the most allowed, %d", f, h.GetValue(), s.cfg.MaxHitsAddend)
			}
			hits[i] = int64(h.GetValue())
		}
	}
	return hits, nil
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
