// Package server is the sluice rate-limit service that `sluice serve`
// runs: Envoy's rate limit service (RLS v3) over gRPC, the same as JSON
// over HTTP, a forward-auth endpoint for nginx, Traefik and Envoy's
// ext_authz, Prometheus metrics and health checks, with a config that
// reloads while it serves.
//
//	srv, err := server.New(server.Settings{Paths: []string{"/etc/sluice"}, Store: store})
//	if err != nil {
//		return err // names each problem's file, line and field
//	}
//	return srv.ListenAndServe(ctx) // until ctx ends, then a graceful shutdown
//
// # Where things are
//
// The service is three rooms:
//
//   - The protocol adapters are package server/internal/protocol: gRPC
//     RLS, POST /json and forward auth, with the response headers and
//     the hand-written JSON codec they share. Each reads its protocol
//     into a decide.Request, has it decided, and writes the outcome back
//     in its protocol. A new protocol adapter (RLQS, say) goes there,
//     beside them, and does the same; adapters.go gives them what they
//     read of the server, and http.go routes to them.
//   - The decision core is package server/internal/decide: a request in,
//     an outcome out, with no server in it. How a request is decided
//     changes there.
//   - The admin console is package server/console, with its page in
//     server/console/ui: a new console panel goes there. admin.go gives
//     it what it reads of the server.
//
// Around them, in this package: the lifecycle (server.go, reload.go,
// snapshot.go, tls.go, health.go, conns.go, shutdown.go), the settings
// (settings.go, headerstyle.go) and the observability (metrics.go,
// memstats.go, failurelog.go, and decide.go, which counts the outcomes
// the core returns).
//
// # Endpoints
//
// gRPC (Settings.GRPCAddr, :8081):
//
//   - envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, on
//     go-control-plane's types, for Envoy, Istio and Envoy Gateway;
//   - grpc.health.v1.Health, "" and the RLS service: SERVING while the
//     server serves, NOT_SERVING once it shuts down;
//   - server reflection, for grpcurl.
//
// HTTP (Settings.HTTPAddr, :8080):
//
//   - POST /json: a RateLimitRequest in proto3 JSON; the RateLimitResponse
//     in proto3 JSON, 200 when OK and 429 when over the limit, as
//     envoyproxy/ratelimit's /json;
//   - /v1/auth and /v1/auth/DOMAIN/…: forward auth (see below);
//   - GET /metrics: Prometheus;
//   - GET /healthz: 200 while the process runs;
//   - GET /readyz: 200 while serving, 503 once shutdown has begun;
//   - /healthcheck: envoyproxy/ratelimit's, for probes written for it: 200
//     "OK" while serving, 500 with no body before and once shutdown has
//     begun (and, with Settings.HealthRequiresConfig, while no domain is
//     loaded).
//
// gRPC health also answers for "ratelimit", envoyproxy/ratelimit's name.
//
// # TLS
//
// Settings.GRPCTLS and Settings.HTTPTLS serve the ports over TLS, and with a
// client CA require client certificates (mTLS), optionally naming a SAN:
// anyone who reaches POST /json can charge or peek any key, so a
// deployment that authenticates Envoy on the gRPC port may want the same
// on the HTTP port. The certificate, key and client CA files are checked
// for a change at most once a second, at a new connection's handshake,
// and a change that loads is served from then on, without a restart.
//
// Admin (ServeAdmin, on a listener of its own: sluice serve puts it on
// 127.0.0.1:6070), with AdminOptions saying what it serves:
//
//   - GET /ui/ (UI): the console, from the binary: live decisions, the
//     policy, a key lookup and the playground;
//   - GET /v1/stats: per second over the last five minutes, per domain and
//     rule, the decisions allowed, denied and denied in shadow mode, the
//     decision latency and the store's errors and health; this process's
//     own, read from the metrics, with no key, value or address;
//   - GET /v1/policy: every limit with its file:line, and the last reload;
//   - POST /v1/simulate (UI): arrivals replayed through the exact
//     algorithms (package internal/sim, as sluice demo), bounded: 100,000
//     arrivals, three algorithms, a sliding log of MaxSimStateBytes, two
//     seconds;
//   - GET /v1/algorithms (UI): the algorithms the playground replays, from
//     sluice's registry (sluice.AlgoInfos);
//   - POST /v1/lookup (Lookup): a key's state under each limit that
//     applies, from a request of cost 0: it charges and counts nothing.
//
// The admin handler answers only to IP addresses, localhost and
// AdminOptions.Hosts in the Host header, takes only JSON in a POST, and
// sends a Content-Security-Policy that lets a page load nothing from
// elsewhere.
//
// # Deciding a request
//
// What this section tells is the decision core's (server/internal/decide).
//
// Each descriptor of a request is matched against its domain's config
// (config.Config.Match, envoyproxy/ratelimit's matching), limits named in
// another matched limit's replaces are dropped (config.ApplyReplaces), and
// every limit left is decided together, all-or-nothing, by one
// sluice.Limiter.Take: if any enforced limit denies, no limit is charged
// (but for usage limits, below). Each request costs hits_addend (0 means
// 1); a descriptor's own hits_addend, if set, is its cost
// (sluice.Check.Cost), and may be 0 to check without charging.
// Descriptors of different costs are still decided together: if one
// denies, none is charged.
//
// Usage limits. A limit with charge: usage in the config
// (sluice.ChargeUsage) records what it is charged whatever is left, for
// costs known after the fact: an LLM gateway checks a token budget when a
// request arrives, with a descriptor whose hits_addend is 0, and charges
// the tokens the answer used when it is done, with hits_addend set to
// them. A charge past what is left is recorded, into debt capped at one
// period's worth, and answered OVER_LIMIT, and a check of 0 is OVER_LIMIT
// while less than one unit is left, so a budget overdrawn stays closed
// until the debt drains. A usage limit is charged even when another limit
// of the request denies; the other limits are charged only when every
// limit, usage ones included, allows. A usage charge always reaches the
// store; one the store fails to record goes to the rule's failure mode
// and is counted in sluice_usage_charges_lost_total. examples/llm runs an
// LLM token budget through the service and through the library.
//
// Charging. All-or-nothing is the default: when a descriptor is over, no
// descriptor of the request is charged, but for its usage limits.
// envoyproxy/ratelimit comes close to it with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (when one of a request's
// keys would go over, it adds the request to the keys going over and to
// none of the others; it reads the counts before it adds, with no lock
// between). That addition still counts: a key of limit 100 at 90, sent a
// request of 20 hits, is at 110 there and denies a request of 5 that
// sluice, which left it at 90, allows. With Settings.ChargePerDescriptor
// (--charge-per-descriptor, the default in envoy mode) sluice counts as
// envoyproxy/ratelimit does by default
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false): every limit is charged
// as sluice.ChargeCount, so every descriptor of a request is charged, over
// its limits or not, each limit recording every hit, and the request is
// still denied when one is over. A descriptor is over when a limit's
// count, its hits added, is past the limit, and a check of hits_addend 0
// is over once the count is past the limit (at exactly the limit it is
// OK), as envoyproxy/ratelimit answers. A limit's count is capped at twice
// the limit (a bucket's debt at its burst), where envoyproxy/ratelimit's
// counter grows without bound: for a fixed window that changes no answer
// within the window. The request is taken once, every descriptor charged
// together.
//
// Limit overrides. A request descriptor's limit (Envoy's per-request
// override, set from route metadata) is honoured as envoyproxy/ratelimit
// honours it: in a domain the config has, it is the descriptor's one
// limit, in place of whatever the config says of the descriptor (its
// limits, unlimited, shadow_mode, quota_mode, replaces, metadata; the
// descriptor need not match the config at all), counted in a fixed window
// of requests_per_unit per unit, aligned to the Unix epoch. In a domain
// the config lacks it is ignored, as the descriptor is. An override has
// no name and no replaces, and no config limit's replaces drop it; global
// shadow and quota modes apply to it. Its counts are keyed by the
// descriptor's entries (config.Config.Key: every value apart, a secret's
// digested) under a rule named for the override's limit ("{override
// 10/1m}", a name no config can give), so that an override never shares a
// count with the config's limits, nor with an override of another rate or
// unit. (envoyproxy/ratelimit keys by the descriptor and the unit's
// window, so there an override and a config limit of the same unit, or two
// overrides of the same unit, share one count.) Unlike
// envoyproxy/ratelimit, which ignores it, unit_multiplier multiplies the
// period, as Envoy documents it. requests_per_unit must be 1 to
// MaxOverrideRequests, the unit SECOND, MINUTE, HOUR, DAY, MONTH (30
// days) or YEAR (365 days), and the period at most MaxOverridePeriod;
// anything else is InvalidArgument naming the field, where
// envoyproxy/ratelimit would take 0 as a limit no request passes and fail
// on an unknown unit. The rules made for overrides are kept, at most
// MaxOverrideRules of them, the least recently used dropped first, so
// that a flood of distinct overrides cannot grow memory; a dropped one
// made again finds its counts in the store. With
// Settings.RefuseLimitOverrides (--refuse-limit-overrides) a request with an
// override is refused with InvalidArgument naming the field.
//
// The answer has one status per descriptor:
//
//   - a descriptor no limit applies to, or a request for a domain the
//     config lacks: OK, with no current_limit and limit_remaining 0, as
//     envoyproxy/ratelimit answers;
//   - an unlimited one: OK, limit_remaining 4294967295;
//   - otherwise OVER_LIMIT if one of its enforced limits denied, else OK,
//     with the limit that denied with the longest wait, or else the one
//     with the least left: current_limit (requests_per_unit per unit,
//     with unit_multiplier for periods such as 30s; UNKNOWN for periods
//     not a whole number of seconds; and name, the limit's name as the
//     config gives it, empty when the config gives none, as
//     envoyproxy/ratelimit fills it), limit_remaining, and
//     duration_until_reset, the time until that limit is back to idle.
//
// overall_code is OVER_LIMIT if any enforced limit denied. The
// response_headers_to_add carry the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) for the enforced limits, in the
// format of package httplimit, and Retry-After in whole seconds, rounded
// up, on a denial:
//
//	RateLimit-Policy: "per_ip";q=20;w=2, "per_ip_hourly";q=1000;w=3600
//	RateLimit: "per_ip";r=0;t=1, "per_ip_hourly";r=979;t=1
//	Retry-After: 1
//
// Settings.ResponseHeaders chooses other headers instead: HeadersEnvoy,
// envoyproxy/ratelimit's RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (names configurable) for the descriptor nearest its
// limit, or the one over it; or HeadersNone. Forward auth keeps
// Retry-After on a denial in every style.
//
// Quota mode, per descriptor (quota_mode in the config) or for every
// descriptor (Settings.QuotaMode, --quota-mode, envoyproxy/ratelimit's
// QUOTA_MODE), is envoyproxy/ratelimit's: a descriptor in quota mode over
// its limit fails the request only when every descriptor in quota mode
// is over. A request with some quota descriptors over and the others
// within is allowed; the ones over say OVER_LIMIT in their statuses and
// are not charged, the rest are. Descriptors not in quota mode stay all
// or nothing: if one of them denies, the request is denied and nothing is
// charged, quota descriptors included. A request denied because all its
// quota descriptors are over charges nothing either, and its Retry-After
// is the wait for the first of them to allow. Usage limits are charged
// in every case. (Under Settings.ChargePerDescriptor every descriptor is
// charged, over or not, and a denied request waits for every descriptor
// not in quota mode and the first quota one to allow.) (To charge the
// quota descriptors within and leave out the ones over, the request is
// taken again without them and without the usage charges already
// recorded; a descriptor seen over is not charged even if another
// request made room in between.) Quota mode and forward auth do
// not go together: there the client chooses which descriptors a request
// has (a header of its own, a fresh API key each time), and one more
// descriptor within its limit would take it past all the others. A config
// with quota_mode on a descriptor of a domain with forward_auth does not
// load, and under Settings.QuotaMode such a domain is refused when the
// config loads (New, Reload), naming the domain and its file and line.
//
// With Settings.DynamicMetadata (--dynamic-metadata, envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA) the response's dynamic_metadata holds, as
// envoyproxy/ratelimit's does, the domain, the request's descriptors
// ("entries": ["key=value", ...], a secret's value as its digest; the
// descriptor's hitsAddend if set) and hitsAddend if set, and under
// "metadata" the config's metadata of the descriptors within their limits
// (not over, not unlimited), merged: where two descriptors give a key, the
// first one's value stays, and two mappings merge the same way. Envoy
// hands it to the filters after the rate limit filter.
//
// Shadow mode, per limit (shadow_mode in the config) or for the whole
// server (Settings.Shadow, --shadow), decides and counts but never denies.
// A limit in shadow mode by the config reports OK for its descriptor; under
// global shadow mode a descriptor over its limit says OVER_LIMIT while
// overall_code stays OK, as in envoyproxy/ratelimit. Limits in shadow mode
// are left out of the RateLimit fields.
//
// A malformed request is refused whole, before anything is charged, with
// gRPC InvalidArgument or HTTP 400 and a message naming the field: an
// empty domain, no descriptors or more than MaxDescriptors, a descriptor
// without entries or with more than MaxEntries, an entry with an empty key,
// a hits_addend above Settings.MaxHitsAddend, a limit override out of its
// bounds (or any under Settings.RefuseLimitOverrides), negative hits (not
// supported), malformed JSON, or a body over Settings.MaxBodyBytes (413).
//
// POST /json answers programs, not web pages. A page's script or form can
// make its visitor's browser POST there without a CORS preflight (fetch
// in no-cors mode with a text/plain body, a form, a multipart upload),
// spending a client's quota; so a request that carries Origin, or a
// Sec-Fetch-Site of cross-site or same-site, which browsers send and
// Envoy, proxies and curl never do, is refused with 403 before anything
// is read or charged. With Settings.HTTPAllowedHosts (--http-allowed-hosts)
// a Host other than those names, an IP address or localhost gets 421:
// under DNS rebinding (a page's own name pointed at the service's
// address) the page is same-origin with the service and could read the
// answers, but its requests carry its own name as Host.
//
// When the store fails, each rule's failure mode (open, closed or local)
// decides; the RateLimit field is then left out, since what is left is not
// known, sluice_store_errors_total counts the failure, and the log warns
// of it, at most once a second with how many there were. A request the
// store refuses as given (sluice.ErrRefused: checks in different Redis
// Cluster slots) is no failure: it is logged and answered Internal (500
// on HTTP). A rule the store cannot hold at all (a limit outside the Redis
// store's exact range) is refused when the config loads.
//
// # Under a flood
//
// Load never switches a limit off. On Redis, each decision waits for its
// turn and then for Redis, and each wait is bounded:
//
//   - at most 1024 requests are in flight towards each Redis (the main
//     one, the per-second one, each master of a Cluster; --redis-max-inflight),
//     queued for a script run or in one;
//   - a request waits for its turn at most the Redis store's timeout
//     (50ms), or until its caller's deadline (Envoy sends its own timeout
//     as the call's gRPC deadline) if sooner; then it is shed;
//   - a call written to Redis has 50ms from its writing (the Redis
//     store's timeout); a call without an answer by then is shed too
//     while that Redis answered another within the last second; after a
//     second of silence it is a failure, which the failure modes decide
//     and the circuit breaker counts.
//
// The store owns the deadline of its calls (redis.WithTimeout, set by
// --redis-timeout; the memory store never waits): the server adds none of
// its own, and the Limiter passes each request's context, with its
// caller's deadline, through to the store.
//
// A shed request is over the limit: OVER_LIMIT, 429 on /json and forward
// auth, with Retry-After: 1, whatever its rules' failure modes, and
// counted in sluice_shed_total by domain. It charged nothing, unless it
// was shed after it was written to Redis: the script may then have run,
// and its charge stays, as any lost answer's. It is never
// allowed and never a gRPC error, which Envoy, under its default
// failure_mode_deny: false, would let through. The circuit breaker opens
// only on sustained failure: over 10s, at least 20 calls reached Redis
// and at least half of them failed (an error reply, a refused or broken
// connection, no answer within the 50ms from a Redis silent for a
// second). A request shed never counts. While it is
// open (a second, then a probe) each rule's failure mode decides;
// sluice_store_breaker_open and sluice_store_breaker_opens_total show it.
// A Redis killed meets the failure modes at once, by its refusals, one
// that stops answering (paused, a network gone silent) after a second of
// silence; the breaker opens within its 10s window. The
// script is loaded into every Redis before the service reports ready, so
// that a cold start under load is decided by Redis, not by the failure
// modes.
//
// Envoy waits for the answer only its own timeout (the rate limit filter's
// timeout, 20ms by default), shorter than the 50ms above. An answer later
// than that is not read: with failure_mode_deny: false (the default) the
// request goes through, counted as failure_mode_allowed; with true it is
// refused with the filter's status_on_error (500 by default). So under a
// flood that makes sluice slower than Envoy's timeout, Envoy's setting
// decides, not sluice's: give the filter a timeout above sluice's
// (100ms covers the wait for a turn and the call) or set
// failure_mode_deny: true where a limit must hold through an outage.
//
// # Forward auth
//
// /v1/auth decides the original request of an auth subrequest, for the
// domain the URL names: exactly /v1/auth takes the query parameter
// "domain", or else the one domain with a forward_auth section (nginx
// and Traefik, whose auth URL the client cannot touch); /v1/auth/DOMAIN/…
// is Envoy's ext_authz, which appends the original path and the client's
// query to its path_prefix, and whose query is never read for the
// domain. A URL form that does not fit the domain's proxy, or a domain
// without forward_auth, is a 400 that names no other domain.
//
// The domain's forward_auth section names the proxy, and only that
// proxy's headers are read, only from a peer in Settings.TrustedProxies
// (by default the loopback addresses); from another peer the client is
// the peer and the method and path are the auth request's own:
//
//	proxy    client address                  method              path                      host
//	nginx    X-Real-IP                       X-Original-Method   X-Original-URI            Host
//	traefik  X-Forwarded-For (right-most)    X-Forwarded-Method  X-Forwarded-Uri           X-Forwarded-Host
//	envoy    X-Forwarded-For (right-most)    the request's       after /v1/auth/DOMAIN     Host
//
// A trusted peer without its proxy's address header is a 400 naming the
// header. What the application behind the proxy takes as one is keyed as
// one. Paths are normalised before they are matched (cleanPath, in
// server/internal/protocol: dot segments and repeated slashes removed,
// unreserved escapes decoded, "\" and "%5C" made separators, path
// parameters, each segment's trailing dots and a trailing slash
// dropped, "%2F" kept); an entry
// "from: path" with "path_match: case_insensitive" also lower-cases the
// path's ASCII letters, for applications that route without regard to
// case (IIS and ASP.NET, Express and Koa by default). Hosts are
// lower-cased, without the trailing dot or the port 80 or 443. An
// Authorization or Proxy-Authorization header is keyed with its scheme's
// case and its spaces normalised ("bearer  T0K" as "Bearer T0K"), as
// httplimit's APIKey keys a bearer token. Allowed:
// 200. Denied: the section's deny_status, 429 or 403 (nginx's
// auth_request passes only 401 and 403 through; map 403 back to 429, see
// examples/nginx), with Retry-After and the RFC 9457 problem body that
// httplimit writes for a 429 (application/problem+json, type
// https://iana.org/assignments/http-problem-types#quota-exceeded). Both
// carry the RateLimit fields.
//
// # Input bounds
//
// An HTTP request must arrive within Settings.ReadTimeout and an idle
// connection is closed after Settings.IdleTimeout; a header is at most 64
// KiB and a body Settings.MaxBodyBytes. A gRPC connection may carry
// Settings.MaxConcurrentStreams calls at once and ping at most every 10s.
// hits_addend is at most Settings.MaxHitsAddend, itself at most MaxCost
// (2^53), which also bounds the hits of descriptors that come to one
// limit and key, added together.
//
// Many connections and calls: each listener holds at most
// Settings.GRPCMaxConnections or Settings.HTTPMaxConnections connections
// (1000 each by default); one past the bound is closed as soon as it is
// accepted and counted in sluice_connections_refused_total. The gRPC
// calls in flight across all connections are at most
// Settings.GRPCMaxStreams (4096): a call past it is refused with
// UNAVAILABLE before anything is given to it (Envoy, with its default
// failure_mode_deny false, then allows the request) and counted in
// sluice_grpc_streams_refused_total. A unary call whose request message
// has not fully arrived within Settings.GRPCRecvTimeout (5s) of its headers
// ends with DEADLINE_EXCEEDED, so a client that sends headers and never
// the message holds a call's place for that long only; streaming calls
// (health's Watch) are not bounded by it. A gRPC connection with no call
// in flight for Settings.MaxConnectionIdle (5m) is closed with a GOAWAY.
// Each call in flight holds a goroutine, whose stack is 8 KiB, and a few
// KiB of heap, about 20 KiB in all: the stream bound is what bounds that
// memory (about 80 MiB at the default 4096; TestServeHeldStreams in
// cmd/sluice measures it), and lowering -grpc-max-streams lowers it in
// proportion. An HTTP connection carries one request at a time,
// so the HTTP bound is also the bound on its requests in flight.
//
// At the memory store's bound (sluice serve's -max-memory), room for a
// new key is made by evicting an idle key, else the least recently used
// key that would still allow; a key that would deny is never evicted,
// so no flood of new keys resets a client that spent its limit. A new
// key that finds no room is decided by its rule's failure mode, local as
// open (there is no second memory), and counted in
// sluice_memory_refusals_total and sluice_store_errors_total. A token
// bucket, leaky bucket or GCRA key of up to 16 bytes is counted 64
// bytes, a window key about twice that, and a longer key also its copy
// (package memory gives the figures): the default 256 MiB holds the
// default 1,048,576 short bucket keys, and 4 MiB about 65,000 of them,
// or about 14,000 sliding log keys of the service's (a window of 4
// requests, and a key of a few dozen bytes).
//
// # Metrics
//
//	sluice_decisions_total{domain,rule,result}  result: within, over, shadow_over
//	sluice_value_decisions_total{domain,rule,descriptor,result}
//	sluice_store_errors_total
//	sluice_usage_charges_lost_total{domain,rule}
//	sluice_decision_duration_seconds{endpoint}  endpoint: grpc, json, auth
//	sluice_config_reloads_total{result}         result: success, failure
//	sluice_config_rules
//	sluice_connections_refused_total{listener}  listener: grpc, http
//	sluice_grpc_streams_refused_total
//	sluice_grpc_calls_in_flight
//	sluice_memory_keys{store}                   store: main, fallback (memory stores only)
//	sluice_memory_bytes{store}
//	sluice_memory_evictions_total{store,kind}   kind: idle, live
//	sluice_memory_refusals_total{store}
//
// Labels come from the config only, so no request can add a series:
// domains the config lacks count as "(unknown)", descriptors no limit
// applies to as rule "(none)", limit overrides, whatever their rates, as
// rule "(override)" in the domain of each request, and no key, descriptor value or address is
// ever a label (detailed_metric is accepted and has no effect here), with
// one exception the config opts into. A descriptor with value_to_metric
// (envoyproxy/ratelimit's) counts its limits' decisions again in
// sluice_value_decisions_total, with the request descriptor as the label
// "descriptor" (config.Match.MetricLabel: route=/api/orders|user, the
// values of the levels that ask, never a secret's, at most 256 bytes).
// It is bounded: each rule counts at most MaxLabelValues (100) descriptors
// apart, and the ones past that under "(other)", so a flood of values
// adds no series; a reload that drops or changes the rule drops its
// series.
//
// # Reloading and shutting down
//
// The config files are polled every Settings.ReloadInterval for a change of
// content, which also sees a Kubernetes ConfigMap's ..data symlink swap,
// and Reload loads them at once (SIGHUP in the command). A config that
// loads replaces the one served atomically: requests in flight finish with
// the config they started with, and unchanged rules keep their counts. One
// that does not is logged with its errors and the last good config keeps
// serving. sluice_config_reloads_total counts both.
//
// When the context given to Serve ends, the server reports itself not
// ready, waits Settings.DrainDelay, stops accepting, lets the requests in
// flight finish (for at most Settings.ShutdownTimeout), and Serve returns
// nil.
package server
