package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/server"
)

// redisFlags say which Redis to count in: one node (-redis URL), a
// Cluster (-redis-cluster) or a master behind Sentinel (-redis-sentinel),
// and how to reach it.
type redisFlags struct {
	url      string // redis://, rediss:// or unix://
	cluster  string // host:port,host:port,…
	sentinel string // master@host:port,host:port,…

	username, password string
	sentinelPassword   string
	tls                bool
	tlsCA              string
	tlsCert, tlsKey    string
	tlsSkipHostname    bool
	poolSize           int
	prefix             string
	maxInFlight        int           // each Redis's bound (redis.WithMaxInFlight)
	timeout            time.Duration // its deadline (redis.WithTimeout)
	// envoyKeys names fixed windows' counters as envoyproxy/ratelimit
	// does, beginning with envoyPrefix (-envoy-keys).
	envoyKeys   bool
	envoyPrefix string
	flag        string // what its flags begin with: redis or redis-persecond
}

// register defines the flags of a Redis whose flags begin with f: redis,
// or redis-persecond for the per-second one (its prefix is the main one's).
func (r *redisFlags) register(fs *flag.FlagSet, f string) {
	fs.StringVar(&r.url, f, "", "")
	fs.StringVar(&r.cluster, f+"-cluster", "", "")
	fs.StringVar(&r.sentinel, f+"-sentinel", "", "")
	fs.StringVar(&r.username, f+"-username", "", "")
	fs.StringVar(&r.password, f+"-password", "", "")
	fs.StringVar(&r.sentinelPassword, f+"-sentinel-password", "", "")
	fs.BoolVar(&r.tls, f+"-tls", false, "")
	fs.StringVar(&r.tlsCA, f+"-tls-ca", "", "")
	fs.StringVar(&r.tlsCert, f+"-tls-cert", "", "")
	fs.StringVar(&r.tlsKey, f+"-tls-key", "", "")
	fs.BoolVar(&r.tlsSkipHostname, f+"-tls-skip-hostname-verification", false, "")
	fs.IntVar(&r.poolSize, f+"-pool-size", 0, "")
	r.flag = f
}

// kind is which Redis the flags name, "" for none (the memory store).
func (f *redisFlags) kind() (string, error) {
	var kinds []string
	for _, k := range []struct{ flag, v string }{{"-" + f.flag, f.url}, {"-" + f.flag + "-cluster", f.cluster}, {"-" + f.flag + "-sentinel", f.sentinel}} {
		if k.v != "" {
			kinds = append(kinds, k.flag)
		}
	}
	if len(kinds) > 1 {
		return "", fmt.Errorf("%s: name one Redis", strings.Join(kinds, " and "))
	}
	if len(kinds) == 0 {
		return "", nil
	}
	return kinds[0], nil
}

// addrs splits a list of host:port addresses.
func addrs(flag, list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("%s: %q: want host:port", flag, a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no address", flag)
	}
	return out, nil
}

// tlsConfig is the TLS to reach Redis with, nil for none.
func (f *redisFlags) tlsConfig() (*tls.Config, error) {
	if !f.tls {
		if f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsSkipHostname {
			return nil, fmt.Errorf("-%[1]s-tls-*: set -%[1]s-tls too (or use a rediss:// URL)", f.flag)
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-%s-tls-ca: %w", f.flag, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-%s-tls-ca: no PEM certificate in %s", f.flag, f.tlsCA)
		}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, fmt.Errorf("-%[1]s-tls-cert and -%[1]s-tls-key go together", f.flag)
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-%s-tls-cert: %w", f.flag, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if f.tlsSkipHostname {
		// The chain is still verified, against the CA or the system's
		// roots; only the name is not.
		roots := c.RootCAs
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis: no server certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return c, nil
}

// redisLog is where go-redis's own log lines go (a failed dial, a
// sentinel's new master): the service's log, at warn, rather than go-redis's
// default of the standard logger. go-redis has one logger per process, set
// before any client exists.
var redisLog atomic.Pointer[slog.Logger]

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.WarnContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
	}
}

func init() { goredis.SetLogger(redisLogger{}) }

// defaultRedisTimeout is -redis-timeout's default, the Redis store's own
// (redis.WithTimeout): far below Envoy's timeout for the rate-limit call,
// so that a Redis that does not answer meets the failure modes first.
const defaultRedisTimeout = 50 * time.Millisecond

// maxRedisTimeout bounds -redis-timeout: a call held longer holds its
// request's goroutine and its place in flight long after any caller of
// a rate limiter has stopped waiting.
const maxRedisTimeout = time.Minute

// openedStore is the store the service counts in.
type openedStore struct {
	store    sluice.Store
	fallback sluice.Store // for rules that fail "local", beside Redis
	// authority shares the leased rules' quota: the main Redis's, so
	// that the replicas on it share each key, or this process's alone on
	// the memory store.
	authority lease.Authority
	name      string
	close     func()
	// pools are the Redis clients' connection counts, for the statistics
	// envoyproxy/ratelimit keeps of its pools.
	pools []server.StatsPool
}

// openStore opens the Redis the flags name, and beside it the per-second
// one that ps names, if any, or a memory store when rf names none. Redis
// is not required to be up: until it answers, each rule's failure mode
// decides.
func openStore(ctx context.Context, rf, ps *redisFlags, maxMem int64, log *slog.Logger) (*openedStore, error) {
	mem, err := memory.New(memory.WithMaxBytes(maxMem))
	if err != nil {
		return nil, fmt.Errorf("-max-memory: %v", err)
	}
	redisLog.Store(log)
	rs, name, closeMain, pool, err := rf.open(ctx, rf, log)
	if err != nil {
		mem.Close()
		return nil, err
	}
	if rs == nil {
		if k, _ := ps.kind(); k != "" {
			mem.Close()
			return nil, fmt.Errorf("%s: a per-second Redis beside no main one (-redis, -redis-cluster or -redis-sentinel)", k)
		}
		return &openedStore{store: mem, authority: lease.NewMemoryAuthority(), name: "memory", close: func() { mem.Close() }}, nil
	}
	o := &openedStore{store: rs, fallback: mem, authority: rs.Authority(), name: name, close: func() {
		closeMain()
		mem.Close()
	}}
	o.pools = []server.StatsPool{{Name: "redis_pool", Conns: pool.conns}}
	second, psName, closeSecond, psPool, err := ps.open(ctx, rf, log)
	if err != nil {
		o.close()
		return nil, err
	}
	if second == nil {
		return o, nil
	}
	pair, err := redis.NewPair(rs, second, redis.ToSecondStore)
	if err != nil {
		closeSecond()
		o.close()
		return nil, err
	}
	o.store, o.name = pair, name+", per second "+psName
	o.pools = append(o.pools, server.StatsPool{Name: "redis_per_second_pool", Conns: psPool.conns})
	o.close = func() {
		closeSecond()
		closeMain()
		mem.Close()
	}
	return o, nil
}

// open makes the Redis store the flags name, its keys as main's flags say
// (the prefix, envoyproxy/ratelimit's key names), its deadline its own;
// nil if they name none.
func (rf *redisFlags) open(ctx context.Context, main *redisFlags, log *slog.Logger) (*redis.Store, string, func(), *poolConns, error) {
	client, name, err := rf.client()
	if err != nil || client == nil {
		return nil, "", nil, nil, err
	}
	opts := []redis.Option{redis.WithMaxInFlight(max(main.maxInFlight, 1))}
	if rf.timeout > 0 {
		opts = append(opts, redis.WithTimeout(rf.timeout))
	}
	if main.prefix != "" {
		opts = append(opts, redis.WithPrefix(main.prefix))
	}
	if main.envoyKeys {
		prefix := main.envoyPrefix
		opts = append(opts, redis.WithWindowKeys(func(c sluice.Check) string {
			if k, ok := strings.CutPrefix(c.Key, config.EnvoyKeyMark); ok {
				return prefix + k
			}
			return ""
		}))
	}
	pool := &poolConns{client: client}
	if cc, ok := client.(*goredis.ClusterClient); ok {
		// A cluster's connections are its nodes' clients'.
		cc.OnNewNode(func(n *goredis.Client) { n.AddHook(pool) })
	} else {
		client.AddHook(pool)
	}
	rs, err := redis.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, "", nil, nil, fmt.Errorf("-redis-prefix: %v", err)
	}
	// The script is loaded before the service reports ready: loaded by
	// the first requests instead, under load, it made them miss their
	// deadline, and their rules' failure modes decide them.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = client.Ping(pctx).Err()
	if err == nil {
		err = rs.Load(pctx)
	}
	if err != nil {
		log.WarnContext(ctx, "redis does not answer yet; until it does, each rule's failure mode decides", "redis", name, "err", err)
	}
	return rs, name, func() { client.Close() }, pool, nil
}

// client makes the go-redis client the flags name and describes it
// without credentials; nil for none. A retry after a lost reply would run
// the script, and charge, twice, so no client retries; and the store's
// own deadline bounds a call.
func (rf *redisFlags) client() (goredis.UniversalClient, string, error) {
	kind, err := rf.kind()
	if err != nil || kind == "" {
		return nil, "", err
	}
	tc, err := rf.tlsConfig()
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "-" + rf.flag:
		return rf.singleClient(kind, tc)
	case "-" + rf.flag + "-cluster":
		as, err := addrs(kind, rf.cluster)
		if err != nil {
			return nil, "", err
		}
		return goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:                 as,
			Username:              rf.username,
			Password:              rf.password,
			TLSConfig:             tc,
			PoolSize:              rf.poolSize,
			MaxRedirects:          3,
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
		}), "redis cluster " + strings.Join(as, ",") + tlsNote(tc), nil
	default: // -redis-sentinel
		master, list, ok := strings.Cut(rf.sentinel, "@")
		if !ok || master == "" {
			return nil, "", fmt.Errorf("%s: %q: want MASTER@HOST:PORT,…", kind, rf.sentinel)
		}
		as, err := addrs(kind, list)
		if err != nil {
			return nil, "", err
		}
		return goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:            master,
			SentinelAddrs:         as,
			SentinelPassword:      rf.sentinelPassword,
			Username:              rf.username,
			Password:              rf.password,
			TLSConfig:             tc,
			PoolSize:              rf.poolSize,
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
		}), "redis sentinel " + master + "@" + strings.Join(as, ",") + tlsNote(tc), nil
	}
}

// singleClient is the client of one Redis node, -redis URL.
func (rf *redisFlags) singleClient(kind string, tc *tls.Config) (goredis.UniversalClient, string, error) {
	opts, err := goredis.ParseURL(rf.url)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v", kind, err)
	}
	if rf.username != "" {
		opts.Username = rf.username
	}
	if rf.password != "" {
		opts.Password = rf.password
	}
	if tc != nil {
		if opts.Network == "unix" {
			return nil, "", fmt.Errorf("%s-tls: not over a unix socket", kind)
		}
		if opts.TLSConfig != nil { // rediss://: its ServerName
			tc.ServerName = opts.TLSConfig.ServerName
		}
		opts.TLSConfig = tc
	}
	if rf.poolSize > 0 {
		opts.PoolSize = rf.poolSize
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	name := "redis " + redactURL(rf.url)
	if opts.TLSConfig != nil && !strings.HasPrefix(rf.url, "rediss:") {
		name += " (TLS)"
	}
	return goredis.NewClient(opts), name, nil
}

func tlsNote(tc *tls.Config) string {
	if tc != nil {
		return " (TLS)"
	}
	return ""
}

// redactURL hides a URL's password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// poolConns counts a Redis client's connections for the statistics
// envoyproxy/ratelimit keeps of its Redis pools (server.StatsPool): those
// it opened, by a dial hook, and those open now, by go-redis's own count.
type poolConns struct {
	client goredis.UniversalClient
	opened atomic.Uint64
}

// conns returns the connections open now and those opened so far.
func (p *poolConns) conns() (active, opened uint64) {
	// The pool counts a connection once its dial returned, when the hook
	// has counted it: read in this order, opened is at least active.
	active = uint64(p.client.PoolStats().TotalConns)
	return active, max(p.opened.Load(), active)
}

func (p *poolConns) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			p.opened.Add(1)
		}
		return c, err
	}
}

func (p *poolConns) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (p *poolConns) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
