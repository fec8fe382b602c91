package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/server"
)

func serveHelp(w io.Writer) { fmt.Fprint(w, serveUsage) }

// serveUsage is sluice serve's help.
const serveUsage = `Usage: sluice serve [flags]

Runs the rate-limit service: Envoy's rate limit service (RLS v3) over gRPC,
the same as JSON over HTTP (POST /json), forward auth for nginx, Traefik and
Envoy's ext_authz (/v1/auth), Prometheus metrics (/metrics) and health
checks (/healthz, /readyz, /healthcheck; gRPC health). With no flags it
serves the built-in policy from memory at once: 'sluice serve --help'
lists it below.

The config files are checked for changes every second and reloaded, and
reloaded at once on SIGHUP; a config that does not load is logged and the
last good one keeps serving. On SIGTERM or SIGINT the service reports
itself not ready, waits -drain, stops accepting, lets the requests in
flight finish, and exits 0.

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
                       JSON, /v1/stats and /v1/policy (default
                       127.0.0.1:6070, this host only); "" turns it off
  -ui                  serve the console and its playground on the admin
                       address (default true; -ui=false leaves the JSON)
  -key-lookup          let the console look up a key's state (a peek that
                       charges nothing). Off by default: it shows any
                       key's state to whoever reaches the admin address
  -pprof               serve Go's profiles at /debug/pprof/ on the admin
                       address. Off by default
  -metrics ADDR        also serve the metrics on a listener of their own
  -metrics-path PATH   their path there (default /metrics)
  -print-config        print every setting and where it came from, and exit
  -envoy-env           read envoyproxy/ratelimit's variables even if none is
                       set (so that its defaults apply); -envoy-env=false
                       ignores them

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
  -redis-pool-size N   connections per node (default: go-redis's, 10 per CPU)
  -redis-prefix P      the prefix of every key (default sluice:)
  -redis-max-inflight N
                       requests in flight towards each Redis (the main one,
                       the per-second one, each master of a Cluster), queued
                       or in a script run (default 1024); a request that
                       finds no room within its 50ms is shed: denied with
                       Retry-After: 1, nothing charged, whatever its rule's
                       failure mode
  -redis-timeout DURATION
                       the Redis store's deadline for each call, from when
                       it is written, and for a request's wait for its turn
                       (default 50ms): the store owns the deadline, and the
                       service adds none of its own
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
                       domain until it does (default: refuse to start)
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

// serveFlags are the flags of sluice serve.
type serveFlags struct {
	configs     listFlag
	trusted     prefixFlag
	jsonHosts   hostsFlag
	httpAddr    string
	grpcAddr    string
	grpcUDS     string
	metricsAddr string
	metricsPath string
	admin       string
	ui          bool
	keyLookup   bool
	pprof       bool
	shadow      bool
	quota       bool
	dynMeta     bool
	perDesc     bool
	refuseOv    bool
	merge       bool
	envoyKeys   bool
	drain       time.Duration
	poll        time.Duration
	readTO      time.Duration
	idleTO      time.Duration
	maxAge      time.Duration
	maxAgeGrace time.Duration
	maxMem      bytesFlag
	conns       connFlags
	gcFloor     gcFloorFlag
	startEmpty  bool
	healthCfg   bool
	headers     string
	names       server.HeaderNames
	logLevel    string
	logFormat   string
	redis       redisFlags
	perSecond   redisFlags // a Redis of its own for per-second limits
	grpcTLS     tlsFlags
	httpTLS     tlsFlags
	printConfig bool
	envoyEnv    bool
}

// tlsFlags are one port's TLS flags.
type tlsFlags struct{ cert, key, clientCA, clientSAN string }

// config is the server.TLS the flags name, nil for none.
func (t tlsFlags) config(port string) (*server.TLS, error) {
	switch {
	case t == tlsFlags{}:
		return nil, nil
	case t.cert == "" || t.key == "":
		return nil, fmt.Errorf("-%s-tls-cert and -%s-tls-key: TLS needs both", port, port)
	case t.clientSAN != "" && t.clientCA == "":
		return nil, fmt.Errorf("-%s-tls-client-san needs -%s-tls-client-ca", port, port)
	}
	return &server.TLS{CertFile: t.cert, KeyFile: t.key, ClientCAFile: t.clientCA, ClientSAN: t.clientSAN}, nil
}

func (t tlsFlags) String() string {
	switch {
	case t.cert == "":
		return "off"
	case t.clientCA == "":
		return "TLS"
	case t.clientSAN == "":
		return "mTLS"
	}
	return "mTLS, SAN " + t.clientSAN
}

func (o *serveFlags) flagSet() *flag.FlagSet {
	o.maxMem = bytesFlag(memory.DefaultMaxBytes)
	o.gcFloor = gcFloorFlag{defaultGCFloor}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Var(&o.configs, "config", "")
	fs.StringVar(&o.httpAddr, "http", server.DefaultHTTPAddr, "")
	fs.StringVar(&o.grpcAddr, "grpc", server.DefaultGRPCAddr, "")
	fs.StringVar(&o.grpcUDS, "grpc-uds", "", "")
	fs.StringVar(&o.metricsAddr, "metrics", "", "")
	fs.StringVar(&o.metricsPath, "metrics-path", "/metrics", "")
	fs.StringVar(&o.admin, "admin", defaultAdminAddr, "")
	fs.BoolVar(&o.ui, "ui", true, "")
	fs.BoolVar(&o.keyLookup, "key-lookup", false, "")
	fs.BoolVar(&o.pprof, "pprof", false, "")
	fs.BoolVar(&o.shadow, "shadow", false, "")
	fs.BoolVar(&o.quota, "quota-mode", false, "")
	fs.BoolVar(&o.dynMeta, "dynamic-metadata", false, "")
	fs.BoolVar(&o.perDesc, "charge-per-descriptor", false, "")
	fs.BoolVar(&o.refuseOv, "refuse-limit-overrides", false, "")
	fs.BoolVar(&o.merge, "merge-domains", false, "")
	fs.BoolVar(&o.envoyKeys, "envoy-keys", false, "")
	fs.DurationVar(&o.drain, "drain", 0, "")
	fs.DurationVar(&o.poll, "poll", server.DefaultReloadInterval, "")
	fs.Var(&o.trusted, "trusted-proxies", "")
	fs.Var(&o.jsonHosts, "http-allowed-hosts", "")
	fs.DurationVar(&o.readTO, "read-timeout", server.DefaultReadTimeout, "")
	fs.DurationVar(&o.idleTO, "idle-timeout", server.DefaultIdleTimeout, "")
	fs.DurationVar(&o.maxAge, "grpc-max-connection-age", 0, "")
	fs.DurationVar(&o.maxAgeGrace, "grpc-max-connection-age-grace", 0, "")
	o.conns.register(fs)
	fs.Var(&o.maxMem, "max-memory", "")
	fs.Var(&o.gcFloor, "gc-floor", "")
	fs.BoolVar(&o.startEmpty, "start-without-config", false, "")
	fs.BoolVar(&o.healthCfg, "health-requires-config", false, "")
	fs.StringVar(&o.headers, "response-headers", server.HeadersIETF.String(), "")
	fs.StringVar(&o.names.Limit, "limit-header", server.DefaultLimitHeader, "")
	fs.StringVar(&o.names.Remaining, "remaining-header", server.DefaultRemainingHeader, "")
	fs.StringVar(&o.names.Reset, "reset-header", server.DefaultResetHeader, "")
	fs.StringVar(&o.logLevel, "log-level", "info", "")
	fs.StringVar(&o.logFormat, "log-format", "text", "")
	o.redis.register(fs, "redis")
	o.perSecond.register(fs, "redis-persecond")
	fs.StringVar(&o.redis.prefix, "redis-prefix", "sluice:", "")
	fs.IntVar(&o.redis.maxInFlight, "redis-max-inflight", redis.DefaultMaxInFlight, "")
	fs.DurationVar(&o.redis.timeout, "redis-timeout", defaultRedisTimeout, "")
	for _, p := range []struct {
		name string
		t    *tlsFlags
	}{{"grpc", &o.grpcTLS}, {"http", &o.httpTLS}} {
		fs.StringVar(&p.t.cert, p.name+"-tls-cert", "", "")
		fs.StringVar(&p.t.key, p.name+"-tls-key", "", "")
		fs.StringVar(&p.t.clientCA, p.name+"-tls-client-ca", "", "")
		fs.StringVar(&p.t.clientSAN, p.name+"-tls-client-san", "", "")
	}
	fs.BoolVar(&o.printConfig, "print-config", false, "")
	fs.BoolVar(&o.envoyEnv, "envoy-env", false, "")
	return fs
}

// runServe is "sluice serve": the command line and the environment become
// settings, the settings a server and its stores, and the server runs
// until ctx ends.
func runServe(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	c, code, ok := parseServe(args, lookupEnv, stdout, stderr)
	if !ok {
		return code
	}
	if c.o.printConfig {
		printConfig(stdout, c.fs, c.sources, c.mode, c.notes)
		return exitOK
	}
	defer gcFloor(int64(c.o.gcFloor.bytesFlag))()
	if c.mode.on {
		c.log.WarnContext(ctx, "envoy mode: envoyproxy/ratelimit's variables configure sluice serve", "because", c.mode.why)
	}
	for _, n := range c.notes {
		c.log.WarnContext(ctx, "envoy mode: "+n.String())
	}
	srv, st, err := c.newServer(ctx)
	if err != nil {
		return serveFailed(stderr, err)
	}
	defer st.close()
	if err := c.run(ctx, srv, st.name, stdout); err != nil {
		return serveFailed(stderr, err)
	}
	return exitOK
}

// serveCmd is a command line of sluice serve, read: its flags, where
// each came from, and the settings they make, all but the store's.
type serveCmd struct {
	o        serveFlags
	fs       *flag.FlagSet
	sources  map[string]string // flag name: "flag -name", a variable, or absent for the default
	mode     envoyMode
	notes    []envNote
	settings server.Settings
	log      *slog.Logger
}

// A usageError is a command line that cannot run: the exit code is
// exitUsage, and the message points to the help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }

func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

// serveFailed writes the message for err, chosen by its type, and returns
// the exit code.
func serveFailed(stderr io.Writer, err error) int {
	var usage *usageError
	var settings *server.SettingsError
	var loading *configError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "sluice serve: %v\nRun 'sluice help serve' for usage.\n", usage.err)
		return exitUsage
	case errors.As(err, &settings): // TLS files, header names: not the config
		fmt.Fprintf(stderr, "sluice serve: %v\n", settings)
	case errors.As(err, &loading):
		fmt.Fprintf(stderr, "sluice serve: the config does not load:\n%v\n", loading.err)
	default:
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
	}
	return exitFail
}

// A configError is a config that does not load: server.New's errors other
// than a server.SettingsError, config.Error among them, and the config
// package's own about its files.
type configError struct{ err error }

func (e *configError) Error() string { return "the config does not load: " + e.err.Error() }

func (e *configError) Unwrap() error { return e.err }

// parseServe reads the command line, and envoyproxy/ratelimit's variables
// through lookupEnv in envoy mode, into a serveCmd. On -h, or on a bad
// command line, it writes the help or the error itself; ok is then false
// and code the exit code.
func parseServe(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) (_ *serveCmd, code int, ok bool) {
	cmd, _ := lookup("serve")
	c := &serveCmd{sources: map[string]string{}}
	c.fs = c.o.flagSet()
	rest, code, ok := parseFlags(cmd, c.fs, args, stdout, stderr)
	if !ok {
		return nil, code, false
	}
	err := func() error {
		if len(rest) > 0 {
			return usagef("unexpected argument %q; the config goes in -config", rest[0])
		}
		if err := c.readEnv(lookupEnv); err != nil {
			return err
		}
		return c.check(stderr)
	}()
	if err != nil {
		return nil, serveFailed(stderr, err), false
	}
	return c, exitOK, true
}

// readEnv notes where each flag given comes from and, in envoy mode, sets
// the flags that envoyproxy/ratelimit's variables name.
func (c *serveCmd) readEnv(lookupEnv func(string) (string, bool)) error {
	c.fs.Visit(func(f *flag.Flag) { c.sources[f.Name] = "flag -" + f.Name })
	c.mode = envoyModeOf(c.o.envoyEnv, c.sources["envoy-env"] != "", lookupEnv)
	if !c.mode.on {
		return nil
	}
	settings, notes, err := envoySettings(lookupEnv)
	if err != nil {
		return usagef("%v", err)
	}
	// A flag wins over the variables, and over its group's: -redis
	// given, REDIS_TYPE=cluster does not add -redis-cluster.
	explicit := maps.Clone(c.sources)
	given := func(name string) bool {
		for _, g := range flagGroups {
			if slices.Contains(g, name) && slices.ContainsFunc(g, func(n string) bool { return explicit[n] != "" }) {
				return true
			}
		}
		return explicit[name] != ""
	}
	for _, s := range settings {
		if given(s.flag) {
			continue
		}
		if err := c.fs.Set(s.flag, s.value); err != nil {
			return usagef("%s (-%s): %v", s.source, s.flag, err)
		}
		c.sources[s.flag] = s.source
	}
	c.notes = notes
	return nil
}

// check refuses flags out of their range, and makes the settings and the
// log they name.
func (c *serveCmd) check(stderr io.Writer) error {
	o := &c.o
	hdrs, err := server.ParseHeaderStyle(o.headers)
	switch {
	case err != nil:
		return usagef("-response-headers: %v", err)
	case o.drain < 0:
		return usagef("-drain %v must not be negative", o.drain)
	case o.poll < 0:
		return usagef("-poll %v must not be negative", o.poll)
	case o.readTO <= 0:
		return usagef("-read-timeout %v must be positive", o.readTO)
	case o.idleTO <= 0:
		return usagef("-idle-timeout %v must be positive", o.idleTO)
	case o.maxAge < 0 || o.maxAgeGrace < 0:
		return usagef("-grpc-max-connection-age %v and -grpc-max-connection-age-grace %v must not be negative", o.maxAge, o.maxAgeGrace)
	case o.metricsPath == "" || o.metricsPath[0] != '/':
		return usagef("-metrics-path %q: want a path such as /metrics", o.metricsPath)
	}
	if err := o.checkRedis(); err != nil {
		return usagef("%v", err)
	}
	if err := o.conns.check(); err != nil {
		return usagef("%v", err)
	}
	grpcTLS, err := o.grpcTLS.config("grpc")
	if err != nil {
		return usagef("%v", err)
	}
	httpTLS, err := o.httpTLS.config("http")
	if err != nil {
		return usagef("%v", err)
	}
	if c.log, err = newLogger(stderr, o.logLevel, o.logFormat); err != nil {
		return usagef("%v", err)
	}
	o.storeFlags(c.sources["redis-prefix"] != "")
	c.settings = o.settings(hdrs, grpcTLS, httpTLS, c.log)
	return nil
}

// checkRedis refuses Redis flags out of their range.
func (o *serveFlags) checkRedis() error {
	switch {
	case o.redis.poolSize < 0:
		return fmt.Errorf("-redis-pool-size %d must not be negative", o.redis.poolSize)
	case o.perSecond.poolSize < 0:
		return fmt.Errorf("-redis-persecond-pool-size %d must not be negative", o.perSecond.poolSize)
	case o.redis.maxInFlight < 1:
		return fmt.Errorf("-redis-max-inflight %d must be at least 1", o.redis.maxInFlight)
	case o.redis.timeout <= 0:
		return fmt.Errorf("-redis-timeout %v must be positive", o.redis.timeout)
	}
	if _, err := o.redis.kind(); err != nil {
		return err
	}
	_, err := o.perSecond.kind()
	return err
}

// storeFlags gives the per-second Redis the main one's keys and bounds,
// and names fixed windows' counters as envoyproxy/ratelimit does under
// -envoy-keys. prefixGiven says -redis-prefix was set.
func (o *serveFlags) storeFlags(prefixGiven bool) {
	if o.envoyKeys {
		// envoyproxy/ratelimit's keys begin with CACHE_KEY_PREFIX, empty
		// unless set: sluice's own default prefix is not theirs.
		o.redis.envoyKeys = true
		if prefixGiven {
			o.redis.envoyPrefix = o.redis.prefix
		}
	}
	o.perSecond.prefix = o.redis.prefix
	o.perSecond.maxInFlight = o.redis.maxInFlight
	o.perSecond.timeout = o.redis.timeout
}

// settings are the server's settings the flags name, all but the store's.
func (o *serveFlags) settings(hdrs server.HeaderStyle, grpcTLS, httpTLS *server.TLS, log *slog.Logger) server.Settings {
	poll := o.poll
	if poll == 0 {
		poll = -1 // server.Settings: negative is off
	}
	s := server.Settings{
		Paths:                 o.configs,
		Shadow:                o.shadow,
		QuotaMode:             o.quota,
		DynamicMetadata:       o.dynMeta,
		MergeDomains:          o.merge,
		EnvoyKeys:             o.envoyKeys,
		ChargePerDescriptor:   o.perDesc,
		RefuseLimitOverrides:  o.refuseOv,
		HTTPAddr:              o.httpAddr,
		HTTPAllowedHosts:      o.jsonHosts.list(),
		GRPCAddr:              o.grpcAddr,
		ReloadInterval:        poll,
		DrainDelay:            o.drain,
		ReadTimeout:           o.readTO,
		IdleTimeout:           o.idleTO,
		MaxConnectionAge:      o.maxAge,
		MaxConnectionAgeGrace: o.maxAgeGrace,
		GRPCTLS:               grpcTLS,
		HTTPTLS:               httpTLS,
		ResponseHeaders:       hdrs,
		HeaderNames:           o.names,
		StartWithoutConfig:    o.startEmpty,
		HealthRequiresConfig:  o.healthCfg,
		Logger:                log,
	}
	o.conns.apply(&s)
	if o.trusted.set {
		s.TrustedProxies = o.trusted.prefixes
	}
	return s
}

// newServer opens the stores the flags name and makes the server on them.
// The caller closes the stores once the server is done.
func (c *serveCmd) newServer(ctx context.Context) (*server.Server, *openedStore, error) {
	st, err := openStore(ctx, &c.o.redis, &c.o.perSecond, int64(c.o.maxMem), c.log)
	if err != nil {
		return nil, nil, &usageError{err}
	}
	s := c.settings
	s.Store, s.Fallback, s.StoreName = st.store, st.fallback, st.name
	srv, err := server.New(s)
	if err != nil {
		st.close()
		if settings := (*server.SettingsError)(nil); !errors.As(err, &settings) {
			err = &configError{err}
		}
		return nil, nil, err
	}
	return srv, st, nil
}

// run serves srv on the listeners the flags name until ctx ends, with
// SIGHUP reloading the config, and then shuts it down.
func (c *serveCmd) run(ctx context.Context, srv *server.Server, storeName string, stdout io.Writer) error {
	ls, err := listenAll(ctx, &c.o, srv)
	if err != nil {
		return err
	}
	defer ls.close()
	var wg sync.WaitGroup
	defer wg.Wait()
	// The SIGHUP handler is in place before the banner says the service
	// is up.
	stopHup := reloadOnHangup(ctx, &wg, srv, c.log, len(c.o.configs) == 0)
	defer stopHup()
	ls.serveSide(c.log)

	// The admin listener lives as long as the service: it stops when
	// Serve returns, whatever the reason.
	adminCtx, stopAdmin := context.WithCancel(ctx)
	defer stopAdmin()
	adminErr := make(chan error, 1)
	if ls.admin != nil {
		opts := server.AdminOptions{UI: c.o.ui, Lookup: c.o.keyLookup, Profile: c.o.pprof, Hosts: adminHosts(c.o.admin)}
		wg.Go(func() { adminErr <- srv.ServeAdmin(adminCtx, ls.admin, opts) })
	}
	printBanner(stdout, banner{
		http: ls.http.Addr(), grpc: ls.grpc.Addr(), configs: c.o.configs, domains: srv.Domains(),
		store: storeName, shadow: c.o.shadow, o: &c.o, mode: c.mode, ls: ls, headers: c.settings.ResponseHeaders,
	})
	err = srv.Serve(ctx, ls.http, ls.grpc)
	stopAdmin()
	if ls.admin != nil {
		if aerr := <-adminErr; err == nil {
			err = aerr
		}
	}
	return err
}

// reloadOnHangup reloads srv's config on each SIGHUP, on a goroutine of
// wg, until the returned function is called. builtIn says srv serves the
// built-in policy, which has nothing to reload.
func reloadOnHangup(ctx context.Context, wg *sync.WaitGroup, srv *server.Server, log *slog.Logger, builtIn bool) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.InfoContext(ctx, "SIGHUP: reloading the config")
				// The server logs and counts the outcome.
				if err := srv.Reload(ctx); err != nil && builtIn {
					log.WarnContext(ctx, "nothing to reload: serving the built-in policy")
				}
			}
		}
	})
	return func() {
		signal.Stop(hup)
		cancel()
	}
}

// defaultAdminAddr is where the console listens: this host only, on the
// port envoyproxy/ratelimit gives its debug listener.
const defaultAdminAddr = "127.0.0.1:6070"

// adminHosts is the host name of -admin when it is a name, which the
// admin listener then answers to besides IP addresses and localhost.
func adminHosts(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return nil
	}
	return []string{host}
}

// adminBanner is the banner's admin line.
func adminBanner(addr net.Addr, ui, lookup bool) string {
	what := "GET /v1/stats, GET /v1/policy"
	if ui {
		host, port, _ := net.SplitHostPort(addr.String())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = "localhost"
		}
		what = "console http://" + net.JoinHostPort(host, port) + "/ui/, " + what + ", POST /v1/simulate"
	}
	if lookup {
		what += ", POST /v1/lookup (key lookup on)"
	}
	return fmt.Sprintf("  admin    %s  %s\n", addr, what)
}

// flagGroups are flags that choose one thing together: given one on the
// command line, the variables set none of them.
var flagGroups = [][]string{{"redis", "redis-cluster", "redis-sentinel"}, {"redis-persecond", "redis-persecond-cluster", "redis-persecond-sentinel"}, {"grpc", "grpc-uds"}}

// envoyMode says whether envoyproxy/ratelimit's variables are read, and
// why.
type envoyMode struct {
	on  bool
	why string
}

func envoyModeOf(flagOn, flagSet bool, lookup func(string) (string, bool)) envoyMode {
	if flagSet {
		return envoyMode{on: flagOn, why: "-envoy-env=" + strconv.FormatBool(flagOn)}
	}
	if set := envoyVarsSet(lookup); len(set) > 0 {
		return envoyMode{on: true, why: strings.Join(set, ", ") + " set"}
	}
	return envoyMode{}
}

// newLogger makes the log on stderr.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// banner is what printBanner says.
type banner struct {
	http, grpc net.Addr
	configs    []string
	domains    []string
	store      string
	shadow     bool
	o          *serveFlags
	mode       envoyMode
	ls         *listeners
	headers    server.HeaderStyle
}

func printBanner(w io.Writer, b banner) {
	cfg := "the built-in policy"
	if len(b.configs) > 0 {
		cfg = strings.Join(b.configs, ", ") + " (reloaded on change and on SIGHUP)"
	}
	shadow := "off"
	if b.shadow {
		shadow = "on: every rule decides and counts, none denies"
	}
	admin := ""
	if b.ls.admin != nil {
		admin = adminBanner(b.ls.admin.Addr(), b.o.ui, b.o.keyLookup)
	}
	fmt.Fprintf(w, `sluice serve: the rate-limit service is up
  grpc     %s  envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1.Health, reflection
  http     %s  POST /json, GET /v1/auth, /metrics, /healthz, /readyz, /healthcheck
%s  config   %s
  domains  %s
  store    %s
  headers  %s
`, b.grpc, b.http, admin, cfg, strings.Join(b.domains, ", "), b.store, b.headers)
	if b.o.grpcTLS.cert != "" || b.o.httpTLS.cert != "" {
		fmt.Fprintf(w, "  tls      grpc %s, http %s\n", b.o.grpcTLS, b.o.httpTLS)
	}
	if b.ls.metrics != nil {
		fmt.Fprintf(w, "  metrics  %s  %s\n", b.ls.metrics.Addr(), b.o.metricsPath)
	}
	if b.mode.on {
		fmt.Fprintf(w, "  mode     envoy: envoyproxy/ratelimit's variables read (%s)\n", b.mode.why)
	}
	fmt.Fprintf(w, "  shadow   %s\n", shadow) // the banner's last line
}

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	if s == "" {
		return errors.New("want a file or directory")
	}
	*f = append(*f, s)
	return nil
}

// bytesFlag is a size in bytes: a whole number, or one with the suffix
// KiB, MiB or GiB.
type bytesFlag int64

var byteUnits = []struct {
	suffix string
	shift  uint
}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}}

func (f *bytesFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *bytesFlag) Set(s string) error {
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64>>u.shift {
			break
		}
		*f = bytesFlag(n << u.shift)
		return nil
	}
	return fmt.Errorf("%q: want a positive size such as 268435456, 512MiB or 1GiB", s)
}

// prefixFlag is a comma-separated list of CIDR prefixes or addresses.
// hostsFlag is a comma-separated list of host names; set even when the
// list is empty, so that -http-allowed-hosts "" answers IP addresses and
// localhost only.
type hostsFlag struct {
	names []string
	set   bool
}

func (f *hostsFlag) String() string { return strings.Join(f.names, ",") }

func (f *hostsFlag) Set(s string) error {
	f.names, f.set = []string{}, true
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.ContainsAny(part, ":/[] ") {
			return fmt.Errorf("%q: want a host name, without a port (IP addresses and localhost are always answered)", part)
		}
		f.names = append(f.names, part)
	}
	return nil
}

// list is the names for server.Settings.HTTPAllowedHosts: nil, any host,
// when the flag is not given.
func (f *hostsFlag) list() []string {
	if !f.set {
		return nil
	}
	return f.names
}

type prefixFlag struct {
	prefixes []netip.Prefix
	set      bool
}

func (f *prefixFlag) String() string {
	var s []string
	for _, p := range f.prefixes {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func (f *prefixFlag) Set(s string) error {
	f.prefixes, f.set = []netip.Prefix{}, true
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			a, aerr := netip.ParseAddr(part)
			if aerr != nil {
				return fmt.Errorf("%q: want a CIDR prefix such as 10.0.0.0/8, or an address", part)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.prefixes = append(f.prefixes, p)
	}
	return nil
}
