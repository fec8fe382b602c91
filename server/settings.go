package server

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// Settings are a Server's process settings: where it listens, what it
// reads its policy from, its bounds. The policy itself, the rules, is a
// config.Config. Only Store is required: with nothing else set, the
// Server serves the built-in policy (config.Default) on :8080 and :8081.
// The value is copied by New; changing it afterwards has no effect.
type Settings struct {
	// Paths are the config files or directories to load (see
	// config.Load), watched for changes. Empty means Policy.
	Paths []string
	// Policy is the config served when Paths is empty. The default is
	// config.Default(), the built-in example policy.
	Policy *config.Config
	// XDS, when set, is where the config comes from instead of Paths and
	// Policy: a control plane that pushes it over xDS (see XDS).
	XDS *XDS
	// MergeDomains lets several files of Paths define one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does (see
	// config.Options). The default refuses a domain defined twice.
	MergeDomains bool
	// EnvoyKeys keys each descriptor that envoyproxy/ratelimit could
	// count by its cache key (config.Options.EnvoyKeys), for a store that
	// names those counters as it does.
	EnvoyKeys bool

	// Store keeps the counts. It is required: the command passes a
	// memory.Store or a redis.Store. The Server does not close it. The
	// store owns the deadline of its calls (redis.WithTimeout): the
	// Server adds none, and passes each request's context through.
	Store sluice.Store
	// StoreName describes the store in the startup log ("memory",
	// "redis://host:6379/0"), without credentials. The default is the
	// store's type.
	StoreName string
	// Fallback, when set, decides the rules whose failure mode is "local"
	// while Store fails: typically a memory.Store beside a Redis one (see
	// sluice.WithFallback). Without one such rules fail closed.
	Fallback sluice.Store
	// Authority, when set, is where the rules the config leases (lease:
	// on a limit) take their share of each key's quota: for replicas
	// sharing one Redis, the Redis store's (redis.Store.Authority); for a
	// server alone on a memory store, lease.NewMemoryAuthority. The Server then decides every request
	// through a lease.Store over Store, the rules without a lease exactly
	// as before, and gives its leases back when Serve returns. nil, the
	// default, decides a leased rule exactly in Store, as though it had no
	// lease, and logs so.
	Authority lease.Authority

	// Shadow puts every rule in shadow mode: requests are decided and
	// counted, and denials reported in metrics and in the descriptor
	// statuses, but the overall answer is always OK. Rules with
	// shadow_mode in the config are in shadow mode regardless.
	Shadow bool
	// QuotaMode puts every descriptor of every request in quota mode, as
	// envoyproxy/ratelimit's QUOTA_MODE does: a request is denied only
	// when each of its descriptors, unlimited ones aside, is over a limit
	// (a descriptor no limit applies to never is). Descriptors with
	// quota_mode in the config are in quota mode regardless. See the
	// package documentation.
	QuotaMode bool
	// ChargePerDescriptor counts as envoyproxy/ratelimit does by default
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false): every limit the
	// config charges as a gate is charged as sluice.ChargeCount, so that
	// every descriptor of a request is charged, over its limits or not,
	// each limit recording every hit into bounded debt, and a check of
	// hits 0 is over once a limit's count is past it. A request with a
	// descriptor over is still denied. A leased limit (lease: in the
	// config) is charged as a gate all the same: a holder decides on the
	// share it holds, which hits it denied must not spend. The default,
	// false, charges a request's gates all or nothing, as
	// envoyproxy/ratelimit approaches with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: when one is over, none
	// is charged. See the package documentation.
	ChargePerDescriptor bool
	// RefuseLimitOverrides refuses a request descriptor's limit (Envoy's
	// per-request limit override, set from route metadata) with
	// InvalidArgument. The default honours it as envoyproxy/ratelimit
	// does; see the package documentation.
	RefuseLimitOverrides bool
	// DynamicMetadata fills each RLS response's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the request's descriptors, and the merged metadata (metadata: in the
	// config) of the descriptors within their limits; see the package
	// documentation. The default is to leave it empty.
	DynamicMetadata bool
	// WholeSecondResets answers each RLS status's duration_until_reset
	// (gRPC and POST /json) in whole seconds, rounded up and at least one
	// second, as envoyproxy/ratelimit does, for clients that compare it.
	// The default keeps the store's precision.
	WholeSecondResets bool

	// Statsd, when set, sends envoyproxy/ratelimit's statistics to a
	// statsd or DogStatsD while Serve runs, beside the Prometheus
	// metrics. The default sends none.
	Statsd *Statsd

	// EnvoyPrometheus, when set, shows envoyproxy/ratelimit's statistics
	// on the Prometheus endpoint under its names. It excludes Statsd.
	EnvoyPrometheus *EnvoyPrometheus

	// StatsPools are the connection pools whose connections Statsd or
	// EnvoyPrometheus reports, with Envoy set, as envoyproxy/ratelimit
	// reports its Redis pools'. The default reports none.
	StatsPools []StatsPool

	// Tracing, when set, traces each decision and each call to the store
	// with OpenTelemetry, and sends the spans over OTLP while Serve runs:
	// see Tracing. The default traces nothing, at no cost to a decision.
	Tracing *Tracing

	// HTTPAddr and GRPCAddr are where ListenAndServe listens. The
	// defaults are ":8080" and ":8081".
	HTTPAddr string
	GRPCAddr string

	// ReloadInterval is how often the config files are checked for a
	// change of content (a hash of their bytes, which also sees a
	// Kubernetes ConfigMap's symlink swap). The default is one second;
	// negative turns polling off, leaving Reload (SIGHUP in the command).
	ReloadInterval time.Duration

	// DrainDelay is how long the server keeps serving after it has
	// started to shut down and reported itself not ready (/readyz 503,
	// gRPC health NOT_SERVING), so that load balancers stop sending it
	// new requests first. The default is 0.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests once the
	// listeners are closed; past it, the remaining connections are cut.
	// The default is 10s.
	ShutdownTimeout time.Duration

	// TrustedProxies are the peers whose headers the forward-auth
	// endpoint believes about the original request: the client's address,
	// method, path and host, each from the headers that the proxy named in
	// the domain's forward_auth section sets. nil means the loopback
	// addresses (a proxy on the same host); an empty, non-nil slice trusts
	// no one.
	TrustedProxies []netip.Prefix

	// HTTPAllowedHosts, when not nil, are the host names that POST /json
	// answers to in a request's Host header, besides IP addresses and
	// localhost; any other gets 421 Misdirected Request. A page whose name
	// an attacker points at this address (DNS rebinding) is the browser's
	// own origin, so that its script could spend quotas and read the
	// answers; it sends its own name as Host. nil, the default, answers
	// any Host. Forward auth is not held to it: nginx passes the original
	// request's Host.
	HTTPAllowedHosts []string

	// MaxHitsAddend is the largest hits_addend a request may carry, in
	// the request or in a descriptor; more is InvalidArgument. The
	// default is DefaultMaxHitsAddend; more than MaxCost is an error.
	MaxHitsAddend uint64
	// MaxBodyBytes bounds the body of POST /json and the size of a gRPC
	// message. The default is DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// ReadTimeout bounds the reading of one HTTP request, its header and
	// body, so that a client that sends slowly or stalls cannot hold a
	// connection and its buffer. IdleTimeout closes a keep-alive
	// connection that has sent nothing for that long: a proxy keeping a
	// pool of connections to the server should time its own out sooner
	// (nginx: keepalive_timeout in the upstream block). The defaults are
	// DefaultReadTimeout and DefaultIdleTimeout.
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	// MaxConcurrentStreams bounds the gRPC calls one connection may have
	// in flight. The default is DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// GRPCMaxStreams bounds the gRPC calls in flight across all
	// connections: a call past it is refused at once with UNAVAILABLE,
	// before a goroutine or a buffer is given to it. Each call in flight
	// holds a goroutine and about 10 KiB. The default is
	// DefaultGRPCMaxStreams; at most MaxGRPCStreams.
	GRPCMaxStreams int
	// GRPCRecvTimeout bounds the wait for a unary call's request message
	// once its headers have come: a call whose message has not fully
	// arrived by then ends with DEADLINE_EXCEEDED (within a tenth of the
	// timeout after, 100ms at most), freeing what it held. Once the
	// message has arrived it no longer applies: the decision has the
	// call's own deadline. It never applies to a streaming call (health's
	// Watch). The default is DefaultGRPCRecvTimeout; at most
	// MaxGRPCRecvTimeout.
	GRPCRecvTimeout time.Duration
	// GRPCMaxConnections and HTTPMaxConnections bound the connections
	// open at once on the gRPC and on the HTTP listener: a connection past
	// the bound is closed as soon as it is accepted. The defaults are
	// DefaultMaxConnections; at most MaxConnections.
	GRPCMaxConnections int
	HTTPMaxConnections int
	// MaxConnectionIdle closes, with a GOAWAY, a gRPC connection that has
	// had no call in flight for that long. The default is
	// DefaultMaxConnectionIdle; negative never closes one.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge, when positive, closes a gRPC connection that old
	// with a GOAWAY, so that clients resolve the service's addresses
	// again and spread over new replicas; MaxConnectionAgeGrace then
	// bounds the calls still in flight on it. The default is 0: no bound
	// (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE is 24h).
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration

	// GRPCTLS and HTTPTLS, when set, serve the gRPC and HTTP ports over
	// TLS, with client certificates required when they name a client CA
	// (mTLS); see TLS. nil serves plain text.
	GRPCTLS *TLS
	HTTPTLS *TLS

	// ResponseHeaders chooses the rate-limit headers a response carries:
	// the RLS response's response_headers_to_add (and POST /json's) and
	// forward auth's headers. The default, HeadersIETF, is the IETF
	// RateLimit fields with Retry-After on a denial; HeadersEnvoy is
	// envoyproxy/ratelimit's three headers, named by HeaderNames;
	// HeadersNone sends none. Forward auth keeps Retry-After on a denial
	// whatever the style: nginx's error page needs it.
	ResponseHeaders HeaderStyle
	// HeaderNames name HeadersEnvoy's headers. An empty name is
	// envoyproxy/ratelimit's default: RateLimit-Limit,
	// RateLimit-Remaining, RateLimit-Reset.
	HeaderNames HeaderNames

	// StartWithoutConfig starts the server even when the config files do
	// not load (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG):
	// it serves no domain, answering every request OK with no limit, until
	// the files load. The default is to refuse to start, New returning
	// the config's errors.
	StartWithoutConfig bool
	// HealthRequiresConfig makes /healthcheck answer 500 while the config
	// served has no domain (envoyproxy/ratelimit's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthRequiresConfig bool

	// RLQS configures Envoy's Rate Limit Quota Service on the gRPC port;
	// see RLQS. The zero value serves it with its defaults.
	RLQS RLQS

	// Clock is the time the limiter decides at. The default is
	// sluice.SystemClock.
	Clock sluice.Clock
	// Logger receives the server's log: start, reloads, shutdown, store
	// failures. The default discards it.
	Logger *slog.Logger
}

// Defaults of Settings.
const (
	DefaultHTTPAddr        = ":8080"
	DefaultGRPCAddr        = ":8081"
	DefaultReloadInterval  = time.Second
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultStatsdFlushInterval and DefaultNearLimitRatio are
	// envoyproxy/ratelimit's STATS_FLUSH_INTERVAL and NEAR_LIMIT_RATIO.
	DefaultStatsdFlushInterval = 10 * time.Second
	DefaultNearLimitRatio      = 0.8
	// DefaultMaxHitsAddend is the default bound on hits_addend: a
	// request worth more than a million hits is a bug, not traffic.
	DefaultMaxHitsAddend = 1_000_000
	// DefaultMaxBodyBytes is the default bound on a request body: a
	// rate-limit request is a few hundred bytes.
	DefaultMaxBodyBytes = 64 << 10
	// MaxCost is the most hits one request may charge one limit and key,
	// its descriptors' hits added together: 2^53, the largest count the
	// Redis store keeps exactly, and far from int64's overflow however
	// many descriptors add up.
	MaxCost = decide.MaxCost

	DefaultReadTimeout          = 5 * time.Second
	DefaultIdleTimeout          = 10 * time.Second
	DefaultMaxConcurrentStreams = 1024

	DefaultGRPCMaxStreams    = 4096
	DefaultGRPCRecvTimeout   = 5 * time.Second
	DefaultMaxConnections    = 1000
	DefaultMaxConnectionIdle = 5 * time.Minute
	// MaxGRPCStreams, MaxConnections and MaxGRPCRecvTimeout bound the
	// bounds: a million calls in flight would hold about 10 GiB.
	MaxGRPCStreams     = 1 << 20
	MaxConnections     = 1 << 20
	MaxGRPCRecvTimeout = time.Hour
)

// Bounds on the shape of one request, so that no request costs more than
// a fixed amount of work.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = decide.MaxDescriptors
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = decide.MaxEntries
)

// loopback is the default TrustedProxies.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// withDefaults returns c with its defaults filled in, or an error for a
// value that cannot be used.
func (c Settings) withDefaults() (Settings, error) {
	if c.Store == nil {
		return c, settingsError("Settings.Store is required")
	}
	if c.XDS != nil {
		if len(c.Paths) > 0 || c.Policy != nil {
			return c, settingsError("XDS with Paths or Policy: the config comes from one source")
		}
		x, err := c.XDS.withDefaults()
		if err != nil {
			return c, settingsError("%w", err)
		}
		c.XDS = x
		// Until the first push, no domain.
		c.Policy = new(config.Config)
	}
	if len(c.Paths) == 0 && c.Policy == nil {
		c.Policy = config.Default()
	}
	if c.StoreName == "" {
		c.StoreName = fmt.Sprintf("%T", c.Store)
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.ReloadInterval == 0 {
		c.ReloadInterval = DefaultReloadInterval
	}
	if c.Statsd != nil {
		sd := *c.Statsd
		if sd.FlushInterval == 0 {
			sd.FlushInterval = DefaultStatsdFlushInterval
		}
		if sd.NearLimitRatio == 0 {
			sd.NearLimitRatio = DefaultNearLimitRatio
		}
		if !(sd.NearLimitRatio > 0 && sd.NearLimitRatio <= 1) {
			return c, settingsError("Statsd.NearLimitRatio %v must be in (0, 1]", sd.NearLimitRatio)
		}
		if sd.FlushInterval < 0 {
			return c, settingsError("Statsd.FlushInterval %v must not be negative", sd.FlushInterval)
		}
		c.Statsd = &sd
	}
	if c.EnvoyPrometheus != nil {
		if c.Statsd != nil {
			return c, settingsError("Statsd and EnvoyPrometheus: set one, not both")
		}
		ep := *c.EnvoyPrometheus
		if ep.NearLimitRatio == 0 {
			ep.NearLimitRatio = DefaultNearLimitRatio
		}
		if !(ep.NearLimitRatio > 0 && ep.NearLimitRatio <= 1) {
			return c, settingsError("EnvoyPrometheus.NearLimitRatio %v must be in (0, 1]", ep.NearLimitRatio)
		}
		c.EnvoyPrometheus = &ep
	}
	for i, p := range c.StatsPools {
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, ".:|#, \n"):
			return c, settingsError("StatsPools[%d].Name %q: want a statistics name's part, without dots", i, p.Name)
		case p.Conns == nil:
			return c, settingsError("StatsPools[%d] (%s): no Conns", i, p.Name)
		}
		for _, q := range c.StatsPools[:i] {
			if q.Name == p.Name {
				return c, settingsError("StatsPools: %q twice", p.Name)
			}
		}
	}
	if c.Tracing != nil {
		t, err := c.Tracing.withDefaults()
		if err != nil {
			return c, settingsError("%w", err)
		}
		c.Tracing = &t
	}
	if c.DrainDelay < 0 {
		return c, settingsError("DrainDelay %v must not be negative", c.DrainDelay)
	}
	if c.ShutdownTimeout < 0 {
		return c, settingsError("ShutdownTimeout %v must not be negative", c.ShutdownTimeout)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.TrustedProxies == nil {
		c.TrustedProxies = loopback
	}
	trusted, err := clientip.Trust(c.TrustedProxies...)
	if err != nil {
		return c, settingsError("TrustedProxies: %w", err)
	}
	c.TrustedProxies = trusted
	if c.MaxHitsAddend == 0 {
		c.MaxHitsAddend = DefaultMaxHitsAddend
	}
	if c.MaxHitsAddend > MaxCost {
		return c, settingsError("MaxHitsAddend %d is more than MaxCost, 2^53", c.MaxHitsAddend)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"ReadTimeout", &c.ReadTimeout, DefaultReadTimeout}, {"IdleTimeout", &c.IdleTimeout, DefaultIdleTimeout}} {
		switch {
		case *d.v < 0:
			return c, settingsError("%s %v must not be negative", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if err := c.connBounds(); err != nil {
		return c, err
	}
	if c.MaxConnectionAge < 0 || c.MaxConnectionAgeGrace < 0 {
		return c, settingsError("MaxConnectionAge %v and MaxConnectionAgeGrace %v must not be negative", c.MaxConnectionAge, c.MaxConnectionAgeGrace)
	}
	for _, t := range []struct {
		name string
		tls  *TLS
	}{{"GRPCTLS", c.GRPCTLS}, {"HTTPTLS", c.HTTPTLS}} {
		if err := t.tls.validate(); err != nil {
			return c, settingsError("%s: %w", t.name, err)
		}
	}
	if c.ResponseHeaders < HeadersIETF || c.ResponseHeaders > HeadersNone {
		return c, settingsError("ResponseHeaders %d is not a HeaderStyle", c.ResponseHeaders)
	}
	c.HeaderNames = c.HeaderNames.withDefaults()
	if err := c.HeaderNames.validate(); err != nil {
		return c, settingsError("HeaderNames: %w", err)
	}
	if c.MaxBodyBytes < 0 {
		return c, settingsError("MaxBodyBytes %d must not be negative", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RLQS, err = c.RLQS.withDefaults(); err != nil {
		return c, err
	}
	if c.Clock == nil {
		c.Clock = sluice.SystemClock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// connBounds fills in the defaults of the bounds on connections and gRPC
// streams, and checks them.
func (c *Settings) connBounds() error {
	for _, n := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{
		{"GRPCMaxStreams", &c.GRPCMaxStreams, DefaultGRPCMaxStreams, MaxGRPCStreams},
		{"GRPCMaxConnections", &c.GRPCMaxConnections, DefaultMaxConnections, MaxConnections},
		{"HTTPMaxConnections", &c.HTTPMaxConnections, DefaultMaxConnections, MaxConnections},
	} {
		switch {
		case *n.v < 0 || *n.v > n.max:
			return settingsError("%s %d must be between 1 and %d", n.name, *n.v, n.max)
		case *n.v == 0:
			*n.v = n.def
		}
	}
	switch {
	case c.GRPCRecvTimeout < 0 || c.GRPCRecvTimeout > MaxGRPCRecvTimeout:
		return settingsError("GRPCRecvTimeout %v must be positive and at most %v", c.GRPCRecvTimeout, MaxGRPCRecvTimeout)
	case c.GRPCRecvTimeout == 0:
		c.GRPCRecvTimeout = DefaultGRPCRecvTimeout
	}
	if c.MaxConnectionIdle == 0 {
		c.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	return nil
}

// A SettingsError is a value of Settings that New cannot use: a bound out
// of range, TLS files that do not load, a store the Limiter refuses. Any
// other error of New's is the config's (a config.Error, or the config
// package's own about its files), so that a caller can tell the two apart
// with errors.As.
type SettingsError struct {
	Err error
}

func (e *SettingsError) Error() string { return "server: " + e.Err.Error() }

func (e *SettingsError) Unwrap() error { return e.Err }

// settingsError is a SettingsError with a message as fmt.Errorf makes it.
func settingsError(format string, a ...any) error {
	return &SettingsError{Err: fmt.Errorf(format, a...)}
}
