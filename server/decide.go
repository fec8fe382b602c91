package server

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// The decision core is package decide; these are its types as the
// adapters of this package speak of them.
type (
	request    = decide.Request
	descriptor = decide.Descriptor
	outcome    = decide.Outcome
	badRequest = decide.BadRequest
	descField  = decide.DescField
)

var badf = decide.Badf

// decide answers req against snap (see package decide), and counts it in
// the metrics and the failure log.
func (s *Server) decide(ctx context.Context, snap *snapshot, req *request, endpoint endpoint) (*outcome, error) {
	start := time.Now()
	defer func() { s.m.observe(endpoint, time.Since(start)) }()
	out, err := s.decider.Decide(ctx, snap.cfg, snap.rules, req)
	if err != nil {
		return nil, err
	}
	domain := req.Domain
	if out.UnknownDomain {
		domain = labelUnknownDomain
	}
	switch {
	case out.StoreErr == nil:
	case errors.Is(out.StoreErr, sluice.ErrShed):
		// Load, not failure: denied, whatever the failure modes say.
		s.m.countShed(domain)
	default:
		s.m.storeErrors.Inc()
		s.failures.note(ctx, s.log, s.cfg.Clock.Now(), domain, out.StoreErr)
	}
	s.count(domain, out)
	return out, nil
}

// count counts each descriptor's decisions in the metrics: a limit's as
// within, over, or over in shadow mode (the config's or global); a
// descriptor no limit applies to, or unlimited, once as within. The usage
// charges a store that failed did not record are counted apart: each
// check of cost > 0 on a limit charged by usage.
func (s *Server) count(domain string, out *outcome) {
	for i := range out.Statuses {
		if st := &out.Statuses[i]; st.Limit == nil {
			rule := labelNoRule
			if st.Unlimited {
				rule = st.Rule
			}
			s.m.countUnruled(domain, rule)
		}
	}
	for j := range out.Checks {
		c, d := &out.Checks[j], &out.Decisions[j]
		result := resultWithin
		if !d.Allowed {
			result = resultOver
			if c.Limit.Rule.Shadow() {
				result = resultShadowOver
			}
		}
		s.m.count(c.Limit, domain, result)
		if c.Label != "" {
			s.m.countValue(c.Limit, domain, c.Label, result)
		}
		if out.UsageLost && c.Limit.Rule.Rule().Charge != sluice.ChargeGate && c.Hits > 0 {
			s.m.lost.WithLabelValues(domain, c.Limit.Label).Inc()
		}
	}
}
