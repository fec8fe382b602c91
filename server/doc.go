// Package server is the sluice rate-limit service that `sluice serve`
// runs: Envoy's rate limit service (RLS v3) over gRPC, the same as JSON
// over HTTP, a forward-auth endpoint for nginx, Traefik and Envoy's
// ext_authz, Prometheus metrics and health checks, with a config that
// reloads while it serves. Choose it to embed the service in a program of
// your own (with a store of your own, say); to run it, sluice serve is
// this package with flags. Example decides requests in process.
//
//	srv, err := server.New(server.Settings{Paths: []string{"/etc/sluice"}, Store: store})
//	if err != nil {
//		return err // names each problem's file, line and field
//	}
//	return srv.ListenAndServe(ctx) // until ctx ends, then a graceful shutdown
//
// What it serves:
//
//   - gRPC (Settings.GRPCAddr, :8081): RateLimitService/ShouldRateLimit on
//     go-control-plane's types, for Envoy, Istio and Envoy Gateway;
//     grpc.health.v1.Health; server reflection, for grpcurl.
//   - HTTP (Settings.HTTPAddr, :8080): POST /json, envoyproxy/ratelimit's
//     RateLimitRequest in proto3 JSON; /v1/auth, forward auth, built by the
//     config's forward_auth section; GET /metrics, /healthz, /readyz and
//     envoyproxy/ratelimit's /healthcheck.
//   - Admin (ServeAdmin, on a listener of its own): the console under
//     /ui/, and its JSON: GET /v1/stats, GET /v1/policy, GET /v1/leases,
//     POST /v1/simulate, POST /v1/lookup.
//
// A request's descriptors are matched against its domain's config and
// decided together by one sluice.Limiter.Take: if any enforced limit
// denies, none is charged (but for usage limits). A limit the config
// leases (lease:) is decided locally on this process's share of its key,
// leased from Settings.Authority, which replicas sharing a Redis share.
// The answer carries the
// IETF RateLimit fields, or envoyproxy/ratelimit's headers
// (Settings.ResponseHeaders). Settings.GRPCTLS and Settings.HTTPTLS serve
// TLS or mTLS. Settings.Tracing traces each decision with OpenTelemetry,
// under the caller's span, and sends the spans over OTLP. When ctx ends, the server reports itself not ready, waits
// Settings.DrainDelay, and lets the requests in flight finish.
//
// The config comes from files (Settings.Paths, watched), from code
// (Settings.Policy), or from an xDS control plane that pushes
// envoyproxy/ratelimit's RateLimitConfig resources, as Envoy Gateway's
// does (Settings.XDS).
//
// The whole service (endpoints, TLS, how a request is decided, leased
// limits, what holds under a flood, forward auth, the input bounds, the metrics, tracing, reloading
// and shutting down, and where things are in the code) is in
// docs/server.md: https://github.com/sluicehq/sluice/blob/main/docs/server.md
package server
