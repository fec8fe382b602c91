package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/console"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
	"github.com/sluicehq/sluice/server/internal/statsd"
)

// rlsService is the gRPC service name health reports on, beside "".
const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// maxHeaderBytes bounds an HTTP request's header: forward auth carries
// the client's headers, which nginx bounds at 32 KB by default.
const maxHeaderBytes = 64 << 10

// Server is the rate-limit service: Envoy's RLS v3 over gRPC, the same as
// JSON over HTTP, forward auth, metrics and health. Make one with New and
// run it with Serve or ListenAndServe. Its methods are safe for concurrent
// use.
type Server struct {
	cfg     Settings
	log     *slog.Logger
	limiter *sluice.Limiter
	tr      *tracer // nil without Settings.Tracing
	m       *metrics
	st      *stats // statsd's; nil without Settings.Statsd
	cur     atomic.Pointer[snapshot]
	health  *health.Server
	// ready is whether the server reports itself ready: it serves
	// (readyMu's serving), and has its config (configured).
	ready      atomic.Bool
	configured atomic.Bool
	readyMu    sync.Mutex
	serving    bool // Serve has begun and shutdown has not; under readyMu
	// xds is the client of Settings.XDS; nil without one.
	xds     *xdsClient
	handler http.Handler
	// failures logs the requests the failure modes decided (failurelog.go).
	failures failureLog
	// metricsHandler serves /metrics, also on a listener of its own.
	metricsHandler http.Handler
	// grpcTLS and httpTLS serve the ports over TLS; nil for plain text.
	grpcTLS, httpTLS *tlsFiles
	// leases decides the leased rules, with Settings.Authority; nil
	// without one.
	leases *lease.Store
	// decider decides requests; its limit overrides are kept across
	// reloads: they do not come from the config.
	decider decide.Decider

	reloadMu reloadLock
	badHash  string // the content of the last config that failed to load

	served   atomic.Bool
	draining chan struct{} // closed when shutdown begins

	admin *console.Console // the admin listener's state (admin.go)
	// adapters serve the protocols (package protocol).
	adapters *protocol.Adapters
	// gate bounds the gRPC calls in flight (conns.go).
	gate *streamGate
	// hashFiles reads the config files to tell whether they changed
	// (hashFiles, snapshot.go). It is where a reload first touches the file
	// system, which may block (a network file system that stopped
	// answering): read runs it on a goroutine that may be abandoned.
	hashFiles func(paths []string) string
}

// New returns a Server for cfg, with its config loaded: a config that does
// not load is an error naming each problem's file, line and field. New
// starts nothing; Serve does.
func New(cfg Settings) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Paths = append([]string(nil), cfg.Paths...)
	var tr *tracer
	if cfg.Tracing != nil {
		tr = newTracer(*cfg.Tracing)
	}
	opts := []sluice.LimiterOption{sluice.WithClock(cfg.Clock)}
	if cfg.Fallback != nil {
		opts = append(opts, sluice.WithFallback(tr.wrap(cfg.Fallback, "fallback")))
	}
	store := tr.wrap(cfg.Store, "main")
	var leases *lease.Store
	if cfg.Authority != nil {
		if leases, err = lease.New(store, cfg.Authority, lease.WithHolder(newLeaseHolder())); err != nil {
			return nil, settingsError("Authority: %w", err)
		}
		store = leases
	}
	lim, err := sluice.NewLimiter(store, opts...)
	if err != nil {
		return nil, settingsError("%w", err)
	}
	s := &Server{
		leases:    leases,
		cfg:       cfg,
		log:       cfg.Logger,
		limiter:   lim,
		tr:        tr,
		m:         newMetrics(),
		health:    health.NewServer(),
		draining:  make(chan struct{}),
		hashFiles: hashFiles,
	}
	s.m.watchStore(cfg.Store)
	if cfg.Statsd != nil {
		if s.st, err = newStats(cfg.Statsd, cfg.StatsPools); err != nil {
			return nil, settingsError("%w", err)
		}
	}
	if ep := cfg.EnvoyPrometheus; ep != nil {
		p := statsd.NewProm(ep.ResponseTimeMillis)
		if ep.Mapper != "" {
			if p, err = statsd.NewPromMapped(ep.ResponseTimeMillis, ep.Mapper); err != nil {
				return nil, settingsError("EnvoyPrometheus.Mapper: %w", err)
			}
		}
		s.st = newStatsOn(p, ep.NearLimitRatio, ep.Envoy, cfg.StatsPools)
		s.m.reg.MustRegister(p)
	}
	s.gate = &streamGate{max: int64(cfg.GRPCMaxStreams), recv: cfg.GRPCRecvTimeout, refused: s.m.streamsRefused.Inc}
	s.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_grpc_calls_in_flight",
		Help: "gRPC calls in flight across all connections, against -grpc-max-streams.",
	}, func() float64 { return float64(s.gate.open.Load()) }))
	if mc := newMemoryCollector(cfg.Store, cfg.Fallback); mc != nil {
		s.m.reg.MustRegister(mc)
	}
	if cfg.GRPCTLS != nil {
		if s.grpcTLS, err = newTLSFiles(*cfg.GRPCTLS, []string{"h2"}, cfg.Logger); err != nil {
			return nil, settingsError("gRPC: %w", err)
		}
	}
	if cfg.HTTPTLS != nil {
		if s.httpTLS, err = newTLSFiles(*cfg.HTTPTLS, []string{"http/1.1"}, cfg.Logger); err != nil {
			return nil, settingsError("HTTP: %w", err)
		}
	}
	s.decider = decide.Decider{Limiter: lim, Shadow: cfg.Shadow, QuotaMode: cfg.QuotaMode, ChargePerDescriptor: cfg.ChargePerDescriptor,
		Overrides: decide.NewOverrides(MaxOverrideRules, func(r sluice.Rule) (*decide.Limit, error) {
			l, err := s.newLimit(r)
			if err == nil {
				l.Label = labelOverride
			}
			return l, err
		})}
	s.adapters = s.newAdapters()
	s.admin = s.newConsole()
	c, hash := cfg.Policy, ""
	if len(cfg.Paths) > 0 {
		hash = hashFiles(cfg.Paths)
		if c, err = (config.Options{MergeDomains: cfg.MergeDomains, EnvoyKeys: cfg.EnvoyKeys}).Load(cfg.Paths...); err != nil {
			if !cfg.StartWithoutConfig {
				return nil, err
			}
			// Serve no domain until the files load; the watcher
			// tries again when they change.
			cfg.Logger.Error("the config does not load: serving no domain until it does", "paths", cfg.Paths, "err", err)
			c, s.badHash, hash = new(config.Config), hash, ""
		}
		s.st.configLoaded(err)
	}
	lis, err := s.prepare(c)
	if err != nil {
		return nil, err
	}
	s.noteLeases(context.Background(), c)
	s.install(newSnapshot(c, lis, nil, hash, cfg.Clock.Now()))
	// A server fed over xDS has its config once the first push loads,
	// unless told to start without it.
	s.configured.Store(cfg.XDS == nil || cfg.StartWithoutConfig)
	if cfg.XDS != nil {
		s.xds = newXDSClient(s, cfg.XDS)
	}
	s.handler = s.routes()
	// Not serving until Serve.
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// setReady notes that Serve has begun (serving) or that shutdown has
// (!serving), and reports the server ready when it serves and has its
// config: gRPC health SERVING, /readyz and /healthcheck 200.
func (s *Server) setReady(serving bool) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	s.serving = serving
	s.updateReady()
}

// setConfigured notes that the server has its config, and reports it
// ready if it serves.
func (s *Server) setConfigured() {
	if s.configured.Swap(true) {
		return
	}
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	s.updateReady()
}

// updateReady sets ready from serving and configured. s.readyMu is held.
func (s *Server) updateReady() {
	r := s.serving && s.configured.Load()
	s.ready.Store(r)
	if r {
		s.setServing(healthpb.HealthCheckResponse_SERVING)
	}
}

// install makes snap the config being served.
func (s *Server) install(snap *snapshot) {
	s.cur.Store(snap)
	s.m.rules.Set(float64(len(snap.Rules)))
}

// Domains lists the domains of the config being served, sorted.
func (s *Server) Domains() []string { return s.cur.Load().Config.Domains() }

// Handler returns the HTTP API: POST /json, GET /v1/auth, /metrics,
// /healthz and /readyz.
func (s *Server) Handler() http.Handler { return s.handler }

// ListenAndServe listens on Settings.HTTPAddr and Settings.GRPCAddr and
// serves until ctx ends, as Serve does.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	hl, err := lc.Listen(ctx, "tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("server: http: %w", err)
	}
	gl, err := lc.Listen(ctx, "tcp", s.cfg.GRPCAddr)
	if err != nil {
		hl.Close()
		return fmt.Errorf("server: grpc: %w", err)
	}
	return s.Serve(ctx, hl, gl)
}

// Serve serves HTTP on httpLn and gRPC on grpcLn, and watches the config
// files, until ctx ends; then it shuts down gracefully and returns nil:
// it reports itself not ready (/readyz 503, gRPC health NOT_SERVING),
// keeps serving for Settings.DrainDelay, closes the listeners, lets the
// requests in flight finish, for at most Settings.ShutdownTimeout, and,
// with Settings.Tracing, sends the spans still buffered, for at most as
// long again. It
// returns early with an error if a listener fails. Serve closes the
// listeners; it may be called only once.
func (s *Server) Serve(ctx context.Context, httpLn, grpcLn net.Listener) error {
	if s.served.Swap(true) {
		httpLn.Close()
		grpcLn.Close()
		return errors.New("server: Serve called twice")
	}
	hs := &http.Server{
		Handler:        s.handler,
		ReadTimeout:    s.cfg.ReadTimeout,
		IdleTimeout:    s.cfg.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(s.cfg.MaxBodyBytes)),
		grpc.MaxConcurrentStreams(s.cfg.MaxConcurrentStreams),
		grpc.ConnectionTimeout(s.cfg.ReadTimeout),
		// A client may ping (HTTP/2 PING) at most every 10s, with or
		// without calls in flight; one that pings more often is sent
		// GOAWAY. Envoy sends no pings unless configured to.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: max(s.cfg.MaxConnectionIdle, 0),
			MaxConnectionAge: s.cfg.MaxConnectionAge, MaxConnectionAgeGrace: s.cfg.MaxConnectionAgeGrace}),
		// Calls run on goroutines that live on, not on one new goroutine
		// each: a new goroutine's stack grows by copying, several times,
		// in every call (gRPC's receive path and the Redis client run
		// deep), a large share of the CPU under load. A call that finds
		// every worker busy still gets a goroutine of its own.
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.InTapHandle(s.gate.tap),
		grpc.UnaryInterceptor(s.gate.unaryArrived),
	}
	if s.tr != nil {
		if err := s.tr.start(ctx); err != nil {
			httpLn.Close()
			grpcLn.Close()
			return err
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(s.tr.unary))
	}
	httpLn = newLimitListener(httpLn, s.cfg.HTTPMaxConnections, s.m.refusedConn(listenerHTTP))
	grpcLn = newLimitListener(grpcLn, s.cfg.GRPCMaxConnections, s.m.refusedConn(listenerGRPC))
	if s.grpcTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.grpcTLS.config())))
	}
	if s.httpTLS != nil {
		httpLn = tls.NewListener(httpLn, s.httpTLS.config())
	}
	gs := grpc.NewServer(opts...)
	rlspb.RegisterRateLimitServiceServer(gs, s.adapters.RLS())
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, s.adapters.RLQS())
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
	s.gate.learn(gs)

	// Ready before either server answers its first request: a caller
	// told the listeners are up (sluice serve's banner) may probe at once,
	// and must not find it not ready in the moment before this line.
	s.setReady(true)
	errc := make(chan error, 2)
	go func() {
		if err := hs.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: http: %w", err)
			return
		}
		errc <- nil
	}()
	go func() {
		// ErrServerStopped: the shutdown came before Serve started.
		if err := gs.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("server: grpc: %w", err)
			return
		}
		errc <- nil
	}()
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The gate's sweeper runs until the shutdown is over: calls held
	// without their message end by it, not by the shutdown's timeout.
	wg.Go(func() { s.gate.run(watchCtx) })
	if s.st != nil {
		wg.Go(func() { s.st.run(watchCtx) })
	}
	if len(s.cfg.Paths) > 0 && s.cfg.ReloadInterval > 0 {
		wg.Go(func() { s.watch(watchCtx) })
	}
	if s.xds != nil {
		wg.Go(func() { s.xds.run(watchCtx) })
	}
	s.log.InfoContext(ctx, "serving", "http", httpLn.Addr().String(), "grpc", grpcLn.Addr().String(),
		"domains", s.Domains(), "store", s.cfg.StoreName, "shadow", s.cfg.Shadow, "lease_holder", s.leaseHolder())

	var err error
	pending := 2
	select {
	case <-ctx.Done():
	case err = <-errc:
		pending--
		if err == nil {
			err = errors.New("server: a listener stopped")
		}
	}
	s.shutdown(ctx, hs, gs)
	// The requests are over: no decision needs the leases any more.
	s.closeLeases(ctx)
	if s.tr != nil {
		// The requests are over: their spans are all ended.
		if terr := s.tr.stop(ctx, s.cfg.ShutdownTimeout); terr != nil {
			s.log.WarnContext(ctx, "tracing: spans not sent at the shutdown", "err", terr)
		}
	}
	stopWatch()
	wg.Wait()
	for ; pending > 0; pending-- {
		if e := <-errc; err == nil {
			err = e
		}
	}
	s.log.InfoContext(ctx, "stopped")
	return err
}

// grpcStreamWorkers is how many calls the gRPC server runs at once on
// goroutines it keeps: about the calls in flight from a few Envoys, each
// waiting on Redis. An idle one costs its stack, a few kilobytes.
const grpcStreamWorkers = 64
