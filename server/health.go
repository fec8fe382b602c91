package server

import (
	"net/http"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// envoyHealthService is the gRPC health service name envoyproxy/ratelimit
// reports on, which probes written for it ask about.
const envoyHealthService = "ratelimit"

// setServing sets the gRPC health of every name the server answers for:
// "", the RLS service and envoyproxy/ratelimit's "ratelimit".
func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range []string{"", rlsService, envoyHealthService} {
		s.health.SetServingStatus(name, st)
	}
}

// serveHealthcheck is /healthcheck as envoyproxy/ratelimit answers it,
// for the probes and load balancers written for it: 200 with the body
// "OK" while the server serves; 500 with no body before Serve, once
// shutdown has begun, and, with Settings.HealthRequiresConfig, while the
// config served has no domain. Any method is answered, as there.
func (s *Server) serveHealthcheck(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() || s.cfg.HealthRequiresConfig && len(s.cur.Load().Config.Domains()) == 0 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}

// MetricsHandler serves the Prometheus metrics that GET /metrics serves,
// for a listener of their own (envoyproxy/ratelimit's PROMETHEUS_ADDR).
func (s *Server) MetricsHandler() http.Handler { return s.metricsHandler }
