package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/server"
)

// serveFlags are the flags of sluice serve.
type serveFlags struct {
	configs     listFlag
	xds         xdsFlags
	trusted     prefixFlag
	jsonHosts   hostsFlag
	httpAddr    string
	grpcAddr    string
	grpcUDS     string
	metricsAddr string
	metricsPath string
	statsd      statsdFlags
	tracing     tracingFlags
	admin       string
	ui          bool
	keyLookup   bool
	pprof       bool
	shadow      bool
	quota       bool
	dynMeta     bool
	wholeResets bool
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
	rlqs        rlqsFlags
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
	o.xds.register(fs)
	fs.StringVar(&o.httpAddr, "http", server.DefaultHTTPAddr, "")
	fs.StringVar(&o.grpcAddr, "grpc", server.DefaultGRPCAddr, "")
	fs.StringVar(&o.grpcUDS, "grpc-uds", "", "")
	fs.StringVar(&o.metricsAddr, "metrics", "", "")
	fs.StringVar(&o.metricsPath, "metrics-path", "/metrics", "")
	fs.StringVar(&o.statsd.addr, "statsd", "", "")
	fs.BoolVar(&o.statsd.dog, "statsd-dog", false, "")
	fs.StringVar(&o.statsd.tags, "statsd-tags", "", "")
	fs.DurationVar(&o.statsd.flush, "statsd-flush", server.DefaultStatsdFlushInterval, "")
	fs.Float64Var(&o.statsd.nearRatio, "near-limit-ratio", server.DefaultNearLimitRatio, "")
	fs.BoolVar(&o.statsd.prom, "envoy-metrics", false, "")
	fs.BoolVar(&o.statsd.promMs, "envoy-metrics-ms", false, "")
	fs.BoolVar(&o.statsd.envoy, "statsd-envoy", false, "")
	o.tracing.register(fs)
	fs.StringVar(&o.statsd.mapper, "envoy-metrics-mapper", "", "")
	fs.Var(&o.statsd.mogs, "statsd-mogrifier", "")
	fs.StringVar(&o.admin, "admin", defaultAdminAddr, "")
	fs.BoolVar(&o.ui, "ui", true, "")
	fs.BoolVar(&o.keyLookup, "key-lookup", false, "")
	fs.BoolVar(&o.pprof, "pprof", false, "")
	fs.BoolVar(&o.shadow, "shadow", false, "")
	fs.BoolVar(&o.quota, "quota-mode", false, "")
	fs.BoolVar(&o.dynMeta, "dynamic-metadata", false, "")
	fs.BoolVar(&o.wholeResets, "whole-second-resets", false, "")
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
	o.rlqs.register(fs)
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
	fs.DurationVar(&o.perSecond.timeout, "redis-persecond-timeout", 0, "")
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
	if c.settings.Tracing != nil {
		// The exporter's failures (a collector down) are the SDK's to
		// report, through its global handler: into the log.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			c.log.WarnContext(ctx, "tracing: the OpenTelemetry SDK", "err", err)
		}))
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
		return c.check(stderr, lookupEnv)
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
// log they name. lookupEnv reads the OpenTelemetry variables.
func (c *serveCmd) check(stderr io.Writer, lookupEnv func(string) (string, bool)) error {
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
	statsd, err := o.statsd.settings()
	if err != nil {
		return usagef("%v", err)
	}
	envoyProm, err := o.statsd.promSettings()
	if err != nil {
		return usagef("%v", err)
	}
	if envoyProm != nil {
		if envoyProm.Mapper, err = o.statsd.readMapper(); err != nil {
			if src, ok := strings.CutPrefix(c.sources["envoy-metrics-mapper"], "env "); ok {
				err = fmt.Errorf("%s: %w", src, err)
			}
			return usagef("%v", err)
		}
	}
	tracing, err := c.tracingSettings(lookupEnv)
	if err != nil {
		return usagef("%v", err)
	}
	if err := o.checkRedis(); err != nil {
		return usagef("%v", err)
	}
	if err := o.conns.check(); err != nil {
		return usagef("%v", err)
	}
	if err := o.rlqs.check(); err != nil {
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
	xds, err := o.xds.settings()
	switch {
	case err != nil:
		return usagef("%v", err)
	case xds != nil && len(o.configs) > 0:
		return usagef("-config and -xds: the config comes from one of them")
	}
	if c.log, err = newLogger(stderr, o.logLevel, o.logFormat); err != nil {
		return usagef("%v", err)
	}
	o.storeFlags(c.sources["redis-prefix"] != "")
	c.settings = o.settings(hdrs, grpcTLS, httpTLS, c.log)
	c.settings.Statsd = statsd
	c.settings.XDS = xds
	c.settings.EnvoyPrometheus = envoyProm
	c.settings.Tracing = tracing
	return nil
}

// tracingSettings are the server.Tracing the flags name. Unless
// -tracing-protocol is given (or TRACING_EXPORTER_PROTOCOL in envoy mode),
// the standard OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL chooses it.
func (c *serveCmd) tracingSettings(lookupEnv func(string) (string, bool)) (*server.Tracing, error) {
	if c.o.tracing.on && c.sources["tracing-protocol"] == "" {
		p, name, err := otlpProtocol(lookupEnv)
		if err != nil {
			return nil, err
		}
		if p != "" {
			c.o.tracing.via = p
			c.sources["tracing-protocol"] = "env " + name
		}
	}
	return c.o.tracing.settings(lookupEnv)
}

// maxRedisPool bounds the connections per node: a Redis server takes
// 10,000 clients by default (maxclients), and go-redis sizes its pool's
// structures by the number at start, so that a mistyped one would take
// the process's memory or panic.
const maxRedisPool = 10_000

// checkRedis refuses Redis flags out of their range.
func (o *serveFlags) checkRedis() error {
	switch {
	case o.redis.poolSize < 0 || o.redis.poolSize > maxRedisPool:
		return fmt.Errorf("-redis-pool-size %d must be 0 to %d (0: go-redis's)", o.redis.poolSize, maxRedisPool)
	case o.perSecond.poolSize < 0 || o.perSecond.poolSize > maxRedisPool:
		return fmt.Errorf("-redis-persecond-pool-size %d must be 0 to %d (0: go-redis's)", o.perSecond.poolSize, maxRedisPool)
	case o.redis.maxInFlight < 1:
		return fmt.Errorf("-redis-max-inflight %d must be at least 1", o.redis.maxInFlight)
	case o.redis.timeout <= 0 || o.redis.timeout > maxRedisTimeout:
		return fmt.Errorf("-redis-timeout %v must be positive and at most %v", o.redis.timeout, maxRedisTimeout)
	case o.perSecond.timeout < 0 || o.perSecond.timeout > maxRedisTimeout:
		return fmt.Errorf("-redis-persecond-timeout %v must be positive and at most %v (0: -redis-timeout's)", o.perSecond.timeout, maxRedisTimeout)
	}
	if _, err := o.redis.kind(); err != nil {
		return err
	}
	_, err := o.perSecond.kind()
	return err
}

// storeFlags gives the per-second Redis the main one's keys and bounds
// (its deadline unless -redis-persecond-timeout sets its own), and names fixed windows' counters as envoyproxy/ratelimit does under
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
	if o.perSecond.timeout == 0 {
		o.perSecond.timeout = o.redis.timeout
	}
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
		WholeSecondResets:     o.wholeResets,
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
	o.rlqs.apply(&s)
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
	s.Store, s.Fallback, s.StoreName, s.Authority = st.store, st.fallback, st.name, st.authority
	s.StatsPools = st.pools
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
	nothing := ""
	switch {
	case c.o.xds.addr != "":
		nothing = "the config comes over xDS, each push taking effect as it comes"
	case len(c.o.configs) == 0:
		nothing = "serving the built-in policy"
	}
	stopHup := reloadOnHangup(ctx, &wg, srv, c.log, nothing)
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
// wg, until the returned function is called. nothing, when srv has no
// config files to reload, says why.
func reloadOnHangup(ctx context.Context, wg *sync.WaitGroup, srv *server.Server, log *slog.Logger, nothing string) (stop func()) {
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
				if err := srv.Reload(ctx); err != nil && nothing != "" {
					log.WarnContext(ctx, "nothing to reload: "+nothing)
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

// flagGroups are flags that choose one thing together: given one on the
// command line, the variables set none of them.
var flagGroups = [][]string{{"config", "xds"}, {"redis", "redis-cluster", "redis-sentinel"}, {"redis-persecond", "redis-persecond-cluster", "redis-persecond-sentinel"}, {"grpc", "grpc-uds"}}

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
