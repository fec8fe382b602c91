package server

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// Bounds on a request's limit override (Envoy's descriptor limit).
const (
	// MaxOverrideRequests is the largest requests_per_unit an override
	// may ask for: a billion per unit is no limit at all, and more is a
	// mistake in the route's metadata.
	MaxOverrideRequests = protocol.MaxOverrideRequests
	// MaxOverridePeriod is the longest period an override may ask for,
	// its unit times its unit_multiplier: a year, the longest unit.
	MaxOverridePeriod = protocol.MaxOverridePeriod
	// MaxOverrideRules is how many override rules (one per rate and
	// period asked for) the server keeps prepared; past it the least
	// recently used is dropped (decide.Overrides), so that a flood of
	// distinct overrides cannot grow memory.
	MaxOverrideRules = 1024
)

// labelOverride is the rule label under which every override's decisions
// are counted: the rates come from requests, so they make no label.
const labelOverride = "(override)"

// ShouldRateLimit decides req as envoy.service.ratelimit.v3's
// RateLimitService does, against the config being served: see the package
// documentation. The error is a gRPC status: InvalidArgument for a
// malformed request, which changes nothing, or the context's.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return s.adapters.ShouldRateLimit(ctx, req)
}

// newAdapters gives the protocol adapters (package protocol) what they
// read of s: the config being served, the decision, and the settings of
// the protocols.
func (s *Server) newAdapters() *protocol.Adapters {
	dec := s.decide
	if s.tr != nil {
		dec = s.decideTraced // tracing.go
	}
	return protocol.New(protocol.Service{
		Current: func() *protocol.Snapshot { return &s.cur.Load().Snapshot },
		Decide:  dec,
		RLSLimit: func(l *decide.Limit) *protocol.RLSLimit {
			return &asideOf(l).rls
		},
		Log:                  s.log,
		MaxHitsAddend:        s.cfg.MaxHitsAddend,
		MaxBodyBytes:         s.cfg.MaxBodyBytes,
		RefuseLimitOverrides: s.cfg.RefuseLimitOverrides,
		DynamicMetadata:      s.cfg.DynamicMetadata,
		WholeSecondResets:    s.cfg.WholeSecondResets,
		Headers:              s.cfg.ResponseHeaders.style(),
		HeaderNames:          protocol.HeaderNames(s.cfg.HeaderNames),
		JSONHosts:            s.cfg.HTTPAllowedHosts,
		Trust:                s.cfg.TrustedProxies,
		RLQS:                 s.rlqsSettings(), // rlqs.go
	})
}
