package main

import (
	"fmt"
	"io"
)

func serveHelp(w io.Writer) { fmt.Fprint(w, serveUsage) }

// serveUsage is sluice serve's help.
const serveUsage = `Usage: sluice serve [flags]

Runs the rate-limit service: Envoy's rate limit service (RLS v3) over gRPC,
the same as JSON over HTTP (POST /json), forward auth for nginx, Traefik and
Envoy's ext_authz (/v1/auth), Envoy's Rate Limit Quota Service (RLQS, on the
gRPC port; experimental), Prometheus metrics (/metrics) and health
checks (/healthz, /readyz, /healthcheck; gRPC health). With no flags it
serves the built-in policy from memory at once: 'sluice serve --help'
lists it below.

The config files are checked for changes every second and reloaded, and
reloaded at once on SIGHUP; a config that does not load is logged and the
last good one keeps serving. On SIGTERM or SIGINT the service reports
itself not ready, waits -drain, stops accepting, lets the requests in
flight finish, gives back the leases it holds, and exits 0.

Limits with lease: in the config are decided on leased quota: each
process holds a share of each key's quota, in proportion to the traffic it
sees, and decides locally from it. The replicas on one Redis share each
key through it (the main one, beside -redis-persecond); on the memory
store the process holds it all. The console's Leases page shows them.

envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, REDIS_URL,
GRPC_SERVER_USE_TLS, ...) configure it too: when any is set, or with
-envoy-env, it runs in envoy mode, reading them with their meaning and
envoyproxy/ratelimit's defaults for those not set (HOST, PORT, LOG_LEVEL
and LOG_FORMAT are read but do not turn envoy mode on). A flag wins over a
variable. Variables sluice does not implement are named at start.
-print-config shows every setting and where it came from.

Flags:
  -config FILE|DIR     the config: a YAML file, or a directory of them
                       (envoyproxy/ratelimit's format; see 'sluice check').
                       May be repeated. Default: the built-in policy
  -merge-domains       let several config files define one domain, their
                       descriptors merged, as envoyproxy/ratelimit's
                       MERGE_DOMAIN_CONFIG (default: a domain defined
                       twice is an error)
  -envoy-keys          count each fixed window that envoyproxy/ratelimit
                       could count in its Redis keys, named as it names them
                       (-redis-prefix, if set, then <domain>_<key>_<value>_..._
                       and the window's start), so that its pods and
                       sluice's share counts during a rolling swap; on a
                       single Redis or Sentinel (default: false; true in
                       envoy mode)
  -http ADDR           the HTTP address (default :8080)
  -grpc ADDR           the gRPC address (default :8081)
  -grpc-uds PATH       serve gRPC on this unix socket instead of -grpc
  -admin ADDR          the admin address: the console at /ui/, and its
                       JSON, /v1/stats, /v1/policy and /v1/leases (default
                       127.0.0.1:6070, this host only); "" turns it off
  -ui                  serve the console and its playground on the admin
                       address (default true; -ui=false leaves the JSON)
  -key-lookup          let the console look up a key's state (a peek that
                       charges nothing), and show the keys of the leases.
                       Off by default: it shows any key's state to
                       whoever reaches the admin address
  -pprof               serve Go's profiles at /debug/pprof/ on the admin
                       address. Off by default
  -metrics ADDR        also serve the metrics on a listener of their own
  -metrics-path PATH   their path there (default /metrics)
  -statsd HOST:PORT    also send envoyproxy/ratelimit's statistics, under
                       its names, to this statsd over TCP (default: none;
                       STATSD_HOST:STATSD_PORT in envoy mode)
  -statsd-dog          send DogStatsD over UDP instead, tags as |#k:v
  -statsd-tags K:V,... tags on every statistic (EXTRA_TAGS)
  -statsd-flush D      how often to send them (default 10s)
  -statsd-mogrifier PATTERN|NAME|TAGS
                       rename the DogStatsD statistics PATTERN matches to
                       NAME and add TAGS (k:v,...; $1 is the first group);
                       repeatable, the first that matches applies
                       (USE_DOG_STATSD_MOGRIFIERS in envoy mode)
  -near-limit-ratio R  hits past floor(limit × R) count as near_limit
                       (default 0.8)
  -envoy-metrics       show envoyproxy/ratelimit's statistics on the metrics
                       endpoint, under its default Prometheus mapper's names
                       (USE_PROMETHEUS in envoy mode)
  -envoy-metrics-ms    their response_time in milliseconds, not seconds
  -envoy-metrics-mapper FILE
                       map them with this statsd_exporter mapping instead
                       (PROMETHEUS_MAPPER_YAML in envoy mode)
  -statsd-envoy        with -statsd or -envoy-metrics, also the Go runtime's
                       and the Redis pools' statistics (ratelimit.go.*,
                       ratelimit.redis_pool.*), and response_time in whole
                       milliseconds, rounded down, as envoyproxy/ratelimit
                       sends them (on in envoy mode)
  -print-config        print every setting and where it came from, and exit
  -envoy-env           read envoyproxy/ratelimit's variables even if none is
                       set (so that its defaults apply); -envoy-env=false
                       ignores them

Config over xDS (instead of -config), as Envoy Gateway gives it:
  -xds HOST:PORT       take the config from this xDS control plane: the
                       RateLimitConfig resources it pushes (state of the
                       world, ADS), one domain each. A push takes effect at
                       once; one that does not load is refused (NACK) and
                       the last good config serves. Not ready until the
                       first push loads, unless -start-without-config. At
                       most 1000 resources a push (CONFIG_TYPE=GRPC_XDS_SOTW)
  -xds-node-id ID      this server's node id (default "default")
  -xds-node-metadata K=V,...
                       the node's metadata
  -xds-headers K:V,... gRPC metadata sent with the stream
  -xds-connect-retry DURATION
                       the wait, give or take half, after an attempt the
                       control plane did not answer (default 3s)
  -xds-backoff-initial DURATION, -xds-backoff-max DURATION
                       the wait before connecting again after a stream
                       ended: doubling from the first to the second
                       (default 10s, 60s)
  -xds-backoff-random-factor F, -xds-backoff-jitter
                       spread each such wait by F either way, when jitter
                       is on (default 0.5, true)
  -xds-max-msg-size BYTES
                       the largest push taken (default 4MiB, at most 256MiB)
  -xds-tls             reach the control plane over TLS; -xds-tls-ca FILE
                       trusts that CA, -xds-tls-cert FILE and -xds-tls-key
                       FILE are a client certificate (mTLS),
                       -xds-tls-server-name NAME the name its certificate
                       must hold

Redis (without one, the counts are in this process's memory):
  -redis URL           one Redis: redis://host:6379/0,
                       rediss://user:pass@host:6380 or unix:///path.sock
                       (go-redis's URL format)
  -redis-cluster HOST:PORT,...
                       a Redis Cluster, by some of its nodes
  -redis-sentinel MASTER@HOST:PORT,...
                       the master named MASTER, found through these
                       sentinels, and found again after a failover
  -redis-username NAME, -redis-password PASSWORD
                       the Redis nodes' ACL user and password
  -redis-sentinel-password PASSWORD
                       the sentinels' password
  -redis-tls           reach Redis over TLS; -redis-tls-ca FILE trusts that
                       CA, -redis-tls-cert FILE and -redis-tls-key FILE are a
                       client certificate, -redis-tls-skip-hostname-verification
                       checks the chain but not the name
  -redis-pool-size N   connections per node, at most 10000 (default: go-redis's, 10 per CPU)
  -redis-prefix P      the prefix of every key (default sluice:)
  -redis-max-inflight N
                       requests in flight towards each Redis (the main one,
                       the per-second one, each master of a Cluster), queued
                       or in a script run (default 1024); a request that
                       finds no room within -redis-timeout is shed: denied
                       with Retry-After: 1, nothing charged, whatever its
                       rule's failure mode
  -redis-timeout DURATION
                       the Redis store's deadline for each call, from when
                       it is written, and for a request's wait for its turn
                       (default 50ms): the store owns the deadline, and the
                       service adds none of its own; at most 1m
  -redis-persecond-timeout DURATION
                       the same for the per-second Redis (default:
                       -redis-timeout's)
  -redis-persecond URL, -redis-persecond-cluster ..., -redis-persecond-sentinel ...
                       a second Redis for the limits per second (envoyproxy/
                       ratelimit's REDIS_PERSECOND), with the same -redis-*
                       flags under -redis-persecond-* (-redis-persecond-tls,
                       -redis-persecond-password, ...); a request on both is
                       taken on each and given back if either denies

TLS (each port on its own; a client CA requires client certificates):
  -grpc-tls-cert FILE, -grpc-tls-key FILE
                       serve gRPC over TLS with this certificate and key
  -grpc-tls-client-ca FILE
                       require a client certificate this CA signed (mTLS)
  -grpc-tls-client-san NAME
                       and that names NAME (a DNS name or an IP)
  -http-tls-cert, -http-tls-key, -http-tls-client-ca, -http-tls-client-san
                       the same for the HTTP port
                       The files are checked for changes at most once a
                       second and a new certificate is served at once.

Tracing (OpenTelemetry, over OTLP):
  -tracing             trace each decision: a span under the caller's (a W3C
                       traceparent or B3, from gRPC metadata or HTTP
                       headers; forward auth's from -trusted-proxies only),
                       with a span for each call to the store, sent where
                       the OTEL_EXPORTER_OTLP_* variables say (default
                       http://localhost:4318); flushed on shutdown
  -tracing-protocol http|grpc
                       OTLP over HTTP with protobuf, or over gRPC (default
                       http, or what OTEL_EXPORTER_OTLP_PROTOCOL says)
  -tracing-sampling-rate R
                       the share, 0 to 1, of the requests without a trace
                       context that start a trace (default 1); a caller's
                       trace is sampled as the caller sampled it
  -tracing-service-name NAME, -tracing-service-namespace NS,
  -tracing-service-instance-id ID
                       the spans' service.name (default sluice),
                       service.namespace and service.instance.id (default:
                       a random UUID)

Responses:
  -response-headers ietf|envoy|none
                       the rate-limit headers of an RLS response: the IETF
                       RateLimit fields and Retry-After (default);
                       envoyproxy/ratelimit's RateLimit-Limit,
                       RateLimit-Remaining and RateLimit-Reset; or none.
                       Forward auth always keeps Retry-After on a denial
  -limit-header NAME, -remaining-header NAME, -reset-header NAME
                       rename envoy's three headers
  -shadow              shadow mode for every rule: decide and count, never
                       deny
  -quota-mode          quota mode for every descriptor, as
                       envoyproxy/ratelimit's QUOTA_MODE: a request is
                       denied only when all its descriptors are over.
                       Refused with a domain served by forward auth (the
                       built-in policy's), whose clients choose their
                       descriptors
  -dynamic-metadata    return the descriptors and their config metadata
                       in each RLS response's dynamic_metadata, as
                       envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA
  -whole-second-resets answer RLS duration_until_reset in whole seconds,
                       rounded up, at least 1s, as envoyproxy/ratelimit
                       does (on in envoy mode). Default: the store's
                       precision
  -charge-per-descriptor
                       count as envoyproxy/ratelimit does by default
                       (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false):
                       every descriptor is charged, over its limits or
                       not, and a check of hits_addend 0 is over once a
                       limit's count is past it. Default: a request is
                       charged all or nothing (limits with charge: usage
                       aside), as that variable's true comes close to
  -refuse-limit-overrides
                       refuse a descriptor's limit override (Envoy's limit
                       from route metadata) with InvalidArgument. Default:
                       honour it as envoyproxy/ratelimit does, a fixed
                       window of its own in place of the config's limits

Behaviour:
  -drain DURATION      how long to keep serving after reporting not ready
                       on shutdown, for load balancers to notice (default 0)
  -poll DURATION       how often to check the config files for changes;
                       0 turns polling off, leaving SIGHUP (default 1s)
  -start-without-config
                       start even if the config does not load, serving no
                       domain until it does (default: refuse to start);
                       with -xds, ready before the first push
  -health-requires-config
                       /healthcheck answers 500 while no domain is loaded
  -trusted-proxies CIDR,...
                       the proxies whose headers forward auth believes
                       (only those its config's proxy: sets); "" trusts
                       none (default 127.0.0.0/8,::1)
  -http-allowed-hosts NAME,...
                       the host names POST /json answers to besides IP
                       addresses and localhost; any other Host gets 421, so
                       that a web page whose name is pointed at this
                       address (DNS rebinding) can neither spend quotas
                       nor read answers (default: any host). POST /json
                       refuses a web page's request (one with Origin or a
                       cross-site Sec-Fetch-Site) with 403 in any case
  -read-timeout DURATION
                       the longest an HTTP request's header and body may
                       take to arrive (default 5s)
  -idle-timeout DURATION
                       how long an idle keep-alive connection stays open
                       (default 10s); a proxy's pool should close sooner
  -grpc-max-connection-age DURATION, -grpc-max-connection-age-grace DURATION
                       close gRPC connections this old, after a grace for
                       their calls, so clients spread over new replicas
                       (default 0: never)
  -grpc-recv-timeout DURATION
                       the longest a unary gRPC call's request message may
                       take to arrive after its headers; past it the call
                       ends with DEADLINE_EXCEEDED (default 5s). Streaming
                       calls (health Watch) are not bounded by it
  -grpc-max-streams N  gRPC calls in flight across all connections, each
                       holding about 10 KiB; more are refused with
                       UNAVAILABLE (default 4096)
  -grpc-max-connections N, -http-max-connections N
                       connections open at once on each port; more are
                       closed as soon as accepted (default 1000)
  -grpc-max-connection-idle DURATION
                       close a gRPC connection with no call in flight for
                       this long (default 5m; 0: never)
  -rlqs-abandon-after DURATION
                       how long a bucket of Envoy's Rate Limit Quota
                       Service may go unreported before its stream is told
                       to abandon it and its share goes back (default 5m)
  -max-memory BYTES    the memory store's bound on what its keys hold, in
                       bytes, KiB, MiB or GiB (default 256MiB); idle keys
                       go first past it, then the least recently used that
                       still allow; a key that denies is never evicted, and
                       a new key that finds no room is decided by its
                       rule's failure mode (local as open)
  -gc-floor BYTES      let Go's heap grow to this size before it is
                       collected (default 64MiB): the service allocates
                       much that dies at once and keeps little, and Go
                       would collect about 100 times a second; 0 leaves
                       GOGC alone. Raises, never lowers, GOGC's percent;
                       GOMEMLIMIT still holds
  -log-level debug|info|warn|error
                       the least important log records written (default info)
  -log-format text|json
                       the log's format on stderr (default text)

The built-in policy, for domain "sluice":
  remote_address  10 a second with bursts of 20, and 1000 an hour
  api_key         50 a second with bursts of 100, and 100000 a day
  forward auth    for nginx's auth_request (X-Real-IP, X-Original-URI,
                  X-Original-Method): by client address, and by the
                  X-API-Key header when present; a denial answers 429
API keys are keyed by their digest: no key reaches the store.
`
