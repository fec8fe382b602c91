package server

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// decide answers req against snap (see package decide), and counts it in
// the metrics and the failure log: the protocol adapters' Service.Decide.
func (s *Server) decide(ctx context.Context, snap *protocol.Snapshot, req *decide.Request, e protocol.Endpoint) (*decide.Outcome, error) {
	start := time.Now()
	out, err := s.decider.Decide(ctx, snap.Config, snap.Rules, req)
	// One reading serves the latency histogram and statsd's response_time.
	took := time.Since(start)
	s.m.observe(e, took)
	s.st.decided(e, req, out, err, took, s.cfg.Shadow)
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
func (s *Server) count(domain string, out *decide.Outcome) {
	for i := range out.Statuses {
		if st := &out.Statuses[i]; st.Limit == nil {
			rule := labelNoRule
			if st.Unlimited {
				rule = st.Rule
			}
			s.m.countUnruled(domain, rule)
		}
	}
	// The request counts once in sluice_requests_total: over when denied,
	// shadow_over when allowed although a check in shadow mode denied.
	request := resultWithin
	if !out.Allowed {
		request = resultOver
	}
	for j := range out.Checks {
		c, d := &out.Checks[j], &out.Decisions[j]
		result := resultWithin
		if !d.Allowed {
			result = resultOver
			if c.Limit.Rule.Shadow() {
				result = resultShadowOver
				if out.Allowed {
					request = resultShadowOver
				}
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
	s.m.countRequest(domain, request)
}
