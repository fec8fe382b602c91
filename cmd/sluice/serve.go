package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/server"
)

func serveHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: sluice serve [flags]

Runs the rate-limit service: Envoy's rate limit service (RLS v3) over gRPC,
the same as JSON over HTTP (POST /json), forward auth for nginx, Traefik and
Envoy's ext_authz (/v1/auth), Prometheus metrics (/metrics) and health
checks (/healthz, /readyz; gRPC health). With no flags it serves the
built-in policy from memory at once: 'sluice serve --help' lists it below.

The config files are checked for changes every second and reloaded, and
reloaded at once on SIGHUP; a config that does not load is logged and the
last good one keeps serving. On SIGTERM or SIGINT the service reports
itself not ready, waits -drain, stops accepting, lets the requests in
flight finish, and exits 0.

Flags:
  -config FILE|DIR     the config: a YAML file, or a directory of them
                       (envoyproxy/ratelimit's format; see 'sluice check').
                       May be repeated. Default: the built-in policy
  -merge-domains       let several config files define one domain, their
                       descriptors merged, as envoyproxy/ratelimit's
                       MERGE_DOMAIN_CONFIG (default: a domain defined
                       twice is an error)
  -redis URL           keep the counts in Redis, e.g. redis://host:6379/0
                       or rediss://user:pass@host:6380 (go-redis's URL
                       format). Default: in this process's memory
  -http ADDR           the HTTP address (default :8080)
  -grpc ADDR           the gRPC address (default :8081)
  -admin ADDR          the admin address: the console at /ui/, and its
                       JSON, /v1/stats and /v1/policy (default
                       127.0.0.1:6070, this host only); "" turns it off
  -ui                  serve the console and its playground on the admin
                       address (default true; -ui=false leaves the JSON)
  -key-lookup          let the console look up a key's state (a peek that
                       charges nothing). Off by default: it shows any
                       key's state to whoever reaches the admin address
  -shadow              shadow mode for every rule: decide and count, never
                       deny
  -quota-mode          quota mode for every descriptor, as
                       envoyproxy/ratelimit's QUOTA_MODE: a request is
                       denied only when all its descriptors are over
  -dynamic-metadata    return the descriptors and their config metadata
                       in each RLS response's dynamic_metadata, as
                       envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA
  -charge-per-descriptor
                       charge each descriptor within its limits even when
                       another descriptor of the request is over, as
                       envoyproxy/ratelimit does by default
                       (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false).
                       Default: a request is charged all or nothing, as
                       that variable's true comes close to
  -refuse-limit-overrides
                       refuse a descriptor's limit override (Envoy's limit
                       from route metadata) with InvalidArgument. Default:
                       honour it as envoyproxy/ratelimit does, a fixed
                       window of its own in place of the config's limits
  -drain DURATION      how long to keep serving after reporting not ready
                       on shutdown, for load balancers to notice (default 0)
  -poll DURATION       how often to check the config files for changes;
                       0 turns polling off, leaving SIGHUP (default 1s)
  -trusted-proxies CIDR,...
                       the proxies whose headers forward auth believes
                       (only those its config's proxy: sets); "" trusts
                       none (default 127.0.0.0/8,::1)
  -read-timeout DURATION
                       the longest an HTTP request's header and body may
                       take to arrive (default 5s)
  -idle-timeout DURATION
                       how long an idle keep-alive connection stays open
                       (default 10s); a proxy's pool should close sooner
  -max-memory BYTES    the memory store's bound on what its keys hold, in
                       bytes, KiB, MiB or GiB (default 256MiB); the least
                       recently used keys go first past it

The built-in policy, for domain "sluice":
  remote_address  10 a second with bursts of 20, and 1000 an hour
  api_key         50 a second with bursts of 100, and 100000 a day
  forward auth    for nginx's auth_request (X-Real-IP, X-Original-URI,
                  X-Original-Method): by client address, and by the
                  X-API-Key header when present; a denial answers 429
API keys are keyed by their digest: no key reaches the store.
`)
}

// runServe is "sluice serve".
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, _ := lookup("serve")
	var (
		configs  listFlag
		trusted  prefixFlag
		redisURL string
		httpAddr string
		grpcAddr string
		admin    string
		ui       bool
		keyPeek  bool
		shadow   bool
		quota    bool
		dynMeta  bool
		perDesc  bool
		refuseOv bool
		merge    bool
		drain    time.Duration
		poll     time.Duration
		readTO   time.Duration
		idleTO   time.Duration
		maxMem   = bytesFlag(memory.DefaultMaxBytes)
	)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Var(&configs, "config", "")
	fs.StringVar(&redisURL, "redis", "", "")
	fs.StringVar(&httpAddr, "http", server.DefaultHTTPAddr, "")
	fs.StringVar(&grpcAddr, "grpc", server.DefaultGRPCAddr, "")
	fs.StringVar(&admin, "admin", defaultAdminAddr, "")
	fs.BoolVar(&ui, "ui", true, "")
	fs.BoolVar(&keyPeek, "key-lookup", false, "")
	fs.BoolVar(&shadow, "shadow", false, "")
	fs.BoolVar(&quota, "quota-mode", false, "")
	fs.BoolVar(&dynMeta, "dynamic-metadata", false, "")
	fs.BoolVar(&perDesc, "charge-per-descriptor", false, "")
	fs.BoolVar(&refuseOv, "refuse-limit-overrides", false, "")
	fs.BoolVar(&merge, "merge-domains", false, "")
	fs.DurationVar(&drain, "drain", 0, "")
	fs.DurationVar(&poll, "poll", server.DefaultReloadInterval, "")
	fs.Var(&trusted, "trusted-proxies", "")
	fs.DurationVar(&readTO, "read-timeout", server.DefaultReadTimeout, "")
	fs.DurationVar(&idleTO, "idle-timeout", server.DefaultIdleTimeout, "")
	fs.Var(&maxMem, "max-memory", "")
	rest, code, ok := parseFlags(c, fs, args, stdout, stderr)
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice serve: "+format+"\nRun 'sluice help serve' for usage.\n", a...)
		return exitUsage
	}
	switch {
	case len(rest) > 0:
		return usageErr("unexpected argument %q; the config goes in -config", rest[0])
	case drain < 0:
		return usageErr("-drain %v must not be negative", drain)
	case poll < 0:
		return usageErr("-poll %v must not be negative", poll)
	case readTO <= 0:
		return usageErr("-read-timeout %v must be positive", readTO)
	case idleTO <= 0:
		return usageErr("-idle-timeout %v must be positive", idleTO)
	}
	if poll == 0 {
		poll = -1 // server.Config: negative is off
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	st, err := openStore(ctx, redisURL, int64(maxMem), log)
	if err != nil {
		return usageErr("%v", err)
	}
	defer st.close()
	cfg := server.Config{
		Paths:     configs,
		Store:     st.store,
		Fallback:  st.fallback,
		StoreName: st.name,
		// The memory store never waits, and the Redis store bounds its
		// own calls (50ms): a second deadline would only cost a timer
		// per request.
		StoreTimeout:   -1,
		Shadow:         shadow,
		HTTPAddr:       httpAddr,
		GRPCAddr:       grpcAddr,
		ReloadInterval: poll,
		DrainDelay:     drain,
		ReadTimeout:    readTO,
		IdleTimeout:    idleTO,
		Logger:         log,
	}
	if trusted.set {
		cfg.TrustedProxies = trusted.prefixes
	}
	cfg.QuotaMode, cfg.DynamicMetadata, cfg.MergeDomains = quota, dynMeta, merge
	cfg.ChargePerDescriptor, cfg.RefuseLimitOverrides = perDesc, refuseOv
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: the config does not load:\n%v\n", err)
		return exitFail
	}
	var lc net.ListenConfig
	hl, err := lc.Listen(ctx, "tcp", httpAddr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: -http: %v\n", err)
		return exitFail
	}
	gl, err := lc.Listen(ctx, "tcp", grpcAddr)
	if err != nil {
		hl.Close()
		fmt.Fprintf(stderr, "sluice serve: -grpc: %v\n", err)
		return exitFail
	}
	var al net.Listener
	if admin != "" {
		if al, err = lc.Listen(ctx, "tcp", admin); err != nil {
			hl.Close()
			gl.Close()
			fmt.Fprintf(stderr, "sluice serve: -admin: %v\n", err)
			return exitFail
		}
	}

	// SIGHUP reloads the config. The handler is in place before the
	// banner says the service is up.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupCtx, stopHup := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopHup()
	wg.Go(func() {
		for {
			select {
			case <-hupCtx.Done():
				return
			case <-hup:
				log.InfoContext(hupCtx, "SIGHUP: reloading the config")
				// The server logs and counts the outcome.
				if err := srv.Reload(hupCtx); err != nil && len(configs) == 0 {
					log.WarnContext(hupCtx, "nothing to reload: serving the built-in policy")
				}
			}
		}
	})

	// The admin listener lives as long as the service: it stops when
	// Serve returns, whatever the reason.
	adminCtx, stopAdmin := context.WithCancel(ctx)
	defer stopAdmin()
	adminErr := make(chan error, 1)
	if al != nil {
		opts := server.AdminOptions{UI: ui, Lookup: keyPeek, Hosts: adminHosts(admin)}
		wg.Go(func() { adminErr <- srv.ServeAdmin(adminCtx, al, opts) })
	}

	adminLine := ""
	if al != nil {
		adminLine = adminBanner(al.Addr(), ui, keyPeek)
	}
	printBanner(stdout, hl.Addr(), gl.Addr(), adminLine, configs, srv.Domains(), st.name, shadow)
	err = srv.Serve(ctx, hl, gl)
	stopAdmin()
	if al != nil {
		if aerr := <-adminErr; err == nil {
			err = aerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitFail
	}
	return exitOK
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

func printBanner(w io.Writer, httpAddr, grpcAddr net.Addr, adminLine string, configs, domains []string, store string, shadow bool) {
	cfg := "the built-in policy"
	if len(configs) > 0 {
		cfg = strings.Join(configs, ", ") + " (reloaded on change and on SIGHUP)"
	}
	mode := "off"
	if shadow {
		mode = "on: every rule decides and counts, none denies"
	}
	fmt.Fprintf(w, `sluice serve: the rate-limit service is up
  grpc     %s  envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1.Health, reflection
  http     %s  POST /json, GET /v1/auth, /metrics, /healthz, /readyz
%s  config   %s
  domains  %s
  store    %s
  shadow   %s
`, grpcAddr, httpAddr, adminLine, cfg, strings.Join(domains, ", "), store, mode)
}

// openedStore is the store the service counts in.
type openedStore struct {
	store    sluice.Store
	fallback sluice.Store // for rules that fail "local", beside Redis
	name     string
	close    func()
}

// openStore opens Redis at rawURL, or a memory store when it is empty.
// Redis is not required to be up: until it answers, each rule's failure
// mode decides.
func openStore(ctx context.Context, rawURL string, maxMem int64, log *slog.Logger) (*openedStore, error) {
	mem, err := memory.New(memory.WithMaxBytes(maxMem))
	if err != nil {
		return nil, fmt.Errorf("-max-memory: %v", err)
	}
	if rawURL == "" {
		return &openedStore{store: mem, name: "memory", close: func() { mem.Close() }}, nil
	}
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("-redis: %v", err)
	}
	// A retry after a lost reply would run the script, and charge, twice;
	// and the store's own deadline should bound a call.
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	client := goredis.NewClient(opts)
	rs, err := redis.New(client)
	if err != nil {
		client.Close()
		mem.Close()
		return nil, fmt.Errorf("-redis: %v", err)
	}
	name := "redis " + redactURL(rawURL)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		log.WarnContext(ctx, "redis does not answer yet; until it does, each rule's failure mode decides", "redis", redactURL(rawURL), "err", err)
	}
	return &openedStore{store: rs, fallback: mem, name: name, close: func() {
		client.Close()
		mem.Close()
	}}, nil
}

// redactURL hides a URL's password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
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
