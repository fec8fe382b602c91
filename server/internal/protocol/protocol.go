package protocol

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/hosts"
)

// A Snapshot is the config being served, as a request is decided against
// it from its start to its answer, whatever reloads meanwhile. The server
// makes one per config it loads; nothing changes it afterwards.
type Snapshot struct {
	Config *config.Config
	// Rules are the config's rules, prepared, by config.Match.ID: what
	// Service.Decide hands to the decision core.
	Rules []*decide.Limit
	// AuthDomain is the domain forward auth serves when the URL names
	// none: the only domain with a forward_auth section, or "".
	AuthDomain string
}

// An Endpoint is where a request came in, for the server's metrics.
type Endpoint uint8

const (
	GRPC Endpoint = iota // ShouldRateLimit
	JSON                 // POST /json
	Auth                 // forward auth
	NumEndpoints
)

// Service is what the adapters need of the server, given to New: the
// config being served, the decision, the log and the settings.
type Service struct {
	// Current returns the config being served.
	Current func() *Snapshot
	// Decide decides req against snap with the decision core, and counts
	// the outcome (in the metrics, as coming in at e, and the failure
	// log). Its error is a *decide.BadRequest for a malformed request, or
	// the context's, or the store's refusal.
	Decide func(ctx context.Context, snap *Snapshot, req *decide.Request, e Endpoint) (*decide.Outcome, error)
	// RLSLimit returns l as RLS reports it, which the server made with
	// NewRLSLimit when it made l, and keeps beside it.
	RLSLimit func(l *decide.Limit) *RLSLimit
	// Log takes the errors no client is told of.
	Log *slog.Logger

	MaxHitsAddend        uint64 // the most hits a request or descriptor may ask for
	MaxBodyBytes         int64  // the bound on POST /json's body
	RefuseLimitOverrides bool   // refuse a descriptor's limit override
	DynamicMetadata      bool   // fill RLS responses' dynamic_metadata
	WholeSecondResets    bool   // RLS resets in whole seconds, rounded up, at least 1s
	Headers              HeaderStyle
	HeaderNames          HeaderNames // HeadersEnvoy's, none empty
	// JSONHosts, when not nil, are the host names POST /json answers to,
	// beside IP addresses and localhost.
	JSONHosts []string
	// Trust are the peers whose forwarding headers forward auth reads.
	Trust clientip.Trusted
	// RLQS are the settings of Envoy's Rate Limit Quota Service.
	RLQS RLQSSettings
}

// Adapters serve the protocols: ShouldRateLimit (gRPC RLS), ServeJSON
// (POST /json), ServeAuth (forward auth) and StreamRateLimitQuotas
// (RLQS). They keep nothing between requests but the RLQS streams open,
// and are safe for concurrent use.
type Adapters struct {
	svc Service
	// headerKeys are the canonical names of the rate-limit headers
	// (headers.go).
	headerKeys map[string]string
	// jsonHosts are Service.JSONHosts as a set, nil for any host.
	jsonHosts map[string]bool
	rlqs      rlqsState
}

// New returns the adapters of svc, which must have every func set.
func New(svc Service) *Adapters {
	a := &Adapters{svc: svc, headerKeys: headerKeys(svc.HeaderNames)}
	a.rlqs.init()
	if svc.JSONHosts != nil {
		a.jsonHosts = hosts.Set(svc.JSONHosts)
	}
	return a
}
