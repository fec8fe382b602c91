package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testredis"
)

// envoyproxy/ratelimit's integration scenarios (its test/integration:
// basic, per-second Redis, cache prefix, stop-increment, TLS, auth,
// Cluster, Sentinel, reload, mTLS, certificate reload, share threshold),
// replayed from outside against sluice serve started with nothing but
// envoyproxy/ratelimit's environment, on free ports, with real
// redis-servers. Each expectation is the whole RateLimitResponse
// envoyproxy/ratelimit gives to the same request: statuses, limits,
// remaining, duration_until_reset in whole seconds and headers.
//
// With ENVOY_RATELIMIT_BIN naming envoyproxy/ratelimit's service_cmd
// (go install github.com/envoyproxy/ratelimit/src/service_cmd@...), the
// same scenarios start it instead of sluice, with the same environment:
// that is how the expectations are held to the reference.
const envoyRefBinEnv = "ENVOY_RATELIMIT_BIN"

// The runtime directory's files, envoyproxy/ratelimit's integration
// configs.
var scenarioConfigs = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`,
	"another.yaml": `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`,
	"share_threshold.yaml": `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
`,
}

// scenarioReloadYAML is the file the reload scenario adds and removes.
const scenarioReloadYAML = `domain: reload
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: block
    rate_limit:
      unit: second
      requests_per_unit: 0
`

// rlsService is a rate limit service under test: sluice serve, or the
// reference, in a process of its own.
type rlsService struct {
	grpc, http, config string // addresses, and the config directory
	out                syncBuffer
	done               chan struct{}
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startRLS writes the runtime directory and runs the service with
// envoyproxy/ratelimit's environment, env after the listeners and the
// runtime directory on free ports and paths of the test's own, until
// /healthcheck answers 200 and the gRPC port accepts. The ports are
// picked free and given to the service, which binds them a moment later:
// another process may take one meanwhile, and then the service is started
// again on others, three times at most.
func startRLS(t *testing.T, env ...string) *rlsService {
	t.Helper()
	for try := 1; ; try++ {
		s, busy := tryStartRLS(t, env...)
		if !busy || try == 3 {
			if busy {
				t.Fatalf("a port taken at each of 3 starts:\n%s", s.out.String())
			}
			return s
		}
	}
}

// tryStartRLS is one start of startRLS; busy says the service exited
// because a port was taken.
func tryStartRLS(t *testing.T, env ...string) (s *rlsService, busy bool) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range scenarioConfigs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port, grpcPort := freePort(t), freePort(t)
	s = &rlsService{grpc: "127.0.0.1:" + grpcPort, http: "127.0.0.1:" + port, config: dir, done: make(chan struct{})}
	env = append([]string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + port, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + freePort(t),
		"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
		// envoyproxy/ratelimit's default, given explicitly so that sluice
		// takes it too: its own, 50ms, is a bound a loaded machine can
		// miss, and a call that misses it fails open.
		"REDIS_TIMEOUT=10s",
	}, env...)
	var cmd *exec.Cmd
	if bin := os.Getenv(envoyRefBinEnv); bin != "" {
		cmd = exec.Command(bin)
		cmd.Env = env
	} else {
		cmd = exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append([]string{serveArgsEnv + "=serve", redisDefaultsEnv + "=1"}, env...)
	}
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-s.done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.http + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.DialTimeout("tcp", s.grpc, time.Second); err == nil {
					c.Close()
					return s, false
				}
			}
		}
		select {
		case <-s.done:
			if strings.Contains(s.out.String(), "address already in use") {
				return s, true
			}
			t.Fatalf("the service exited before it was healthy:\n%s", s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck not 200 after 30s: %v\n%s", err, s.out.String())
		}
		time.Sleep(20 * time.Millisecond) // the service starts on its own time
	}
}

// client is an RLS client of the service's gRPC port, over creds
// (plaintext when nil).
func (s *rlsService) client(t *testing.T, creds credentials.TransportCredentials) rlspb.RateLimitServiceClient {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// rlsRequest is a request of domain with a descriptor of one entry for
// each key and value of kv.
func rlsRequest(domain string, kv ...string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Descriptors = append(req.Descriptors, &ratelimitpb.RateLimitDescriptor{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return req
}

// A wantStatus is a descriptor's status as envoyproxy/ratelimit gives it;
// its zero value is the status of a descriptor no limit applies to.
type wantStatus struct {
	over  bool
	limit uint32
	unit  rlspb.RateLimitResponse_RateLimit_Unit
	left  uint32
}

func allowed(limit uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, left uint32) wantStatus {
	return wantStatus{limit: limit, unit: unit, left: left}
}

func denied(limit uint32, unit rlspb.RateLimitResponse_RateLimit_Unit) wantStatus {
	return wantStatus{over: true, limit: limit, unit: unit}
}

const (
	perSecond = rlspb.RateLimitResponse_RateLimit_SECOND
	perMinute = rlspb.RateLimitResponse_RateLimit_MINUTE
	perHour   = rlspb.RateLimitResponse_RateLimit_HOUR
	perDay    = rlspb.RateLimitResponse_RateLimit_DAY
)

var unitSeconds = map[rlspb.RateLimitResponse_RateLimit_Unit]int64{perSecond: 1, perMinute: 60, perHour: 3600, perDay: 86400}

// wantResponse is the response envoyproxy/ratelimit gives with these
// statuses at Unix second now: each reset is the unit's rest, unit − now
// mod unit, and with headers, its RateLimit-* headers describe the status
// with the fewest remaining (the first of equals), or the last denied.
func wantResponse(now int64, headers bool, sts ...wantStatus) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	var least *rlspb.RateLimitResponse_DescriptorStatus
	for _, w := range sts {
		ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if w.unit != rlspb.RateLimitResponse_RateLimit_UNKNOWN {
			u := unitSeconds[w.unit]
			ds.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: w.limit, Unit: w.unit}
			ds.LimitRemaining = w.left
			ds.DurationUntilReset = &durationpb.Duration{Seconds: u - now%u}
			if least == nil || w.left < least.LimitRemaining {
				least = ds
			}
		}
		if w.over {
			ds.Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			least = ds
		}
		resp.Statuses = append(resp.Statuses, ds)
	}
	if headers && least != nil {
		for _, h := range [][2]string{
			{"RateLimit-Limit", strconv.FormatUint(uint64(least.CurrentLimit.RequestsPerUnit), 10)},
			{"RateLimit-Remaining", strconv.FormatUint(uint64(least.LimitRemaining), 10)},
			{"RateLimit-Reset", strconv.FormatInt(least.DurationUntilReset.Seconds, 10)},
		} {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: h[0], Value: h[1]})
		}
	}
	return resp
}

// An rlsReplay sends requests and compares each whole response with
// envoyproxy/ratelimit's, collecting the differences.
type rlsReplay struct {
	t       *testing.T
	rls     rlspb.RateLimitServiceClient
	headers bool // LIMIT_RESPONSE_HEADERS_ENABLED
	diffs   []string
}

// ask sends req and compares the response with the one envoyproxy/ratelimit
// gives at a second between the one it was sent in and the one it was
// answered in.
func (r *rlsReplay) ask(what string, req *rlspb.RateLimitRequest, want ...wantStatus) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	before := time.Now().Unix()
	resp, err := r.rls.ShouldRateLimit(ctx, req)
	after := time.Now().Unix()
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	for now := before; now <= after; now++ {
		if proto.Equal(resp, wantResponse(now, r.headers, want...)) {
			return
		}
	}
	r.diffs = append(r.diffs, fmt.Sprintf("%s:\n got  %s\n want %s", what,
		prototext.MarshalOptions{}.Format(resp), prototext.MarshalOptions{}.Format(wantResponse(before, r.headers, want...))))
}

// inOneWindow runs a sequence of requests whose answers count within one
// window of unit, with the attempt's number to make its values fresh, and
// reports its differences. A sequence that straddles the window's end
// counts in two windows, which is no fault of the service's: it is run
// again with fresh values.
func (r *rlsReplay) inOneWindow(unit rlspb.RateLimitResponse_RateLimit_Unit, seq func(try int)) {
	r.t.Helper()
	u := unitSeconds[unit]
	for try := 0; ; try++ {
		r.diffs = nil
		start := time.Now().Unix()
		seq(try)
		if time.Now().Unix()/u == start/u {
			break
		}
		if try == 3 {
			r.t.Fatalf("four runs straddled the end of a %v window", unit)
		}
	}
	for _, d := range r.diffs {
		r.t.Error(d)
	}
	r.diffs = nil
}

// fresh is a value no run of the test has used.
func fresh(try int) string { return fmt.Sprintf("%d-%d", time.Now().UnixNano(), try) }

// basicReplay is envoyproxy/ratelimit's basic scenario: a domain no
// config names, one request under a limit per second, a limit per minute
// taken past its end, and two descriptors on limits of a minute and an
// hour, the second taken past its end. stopIncrement is
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. It returns the values the
// limits were counted under.
func basicReplay(t *testing.T, r *rlsReplay, stopIncrement bool) (key2, twoKeys string) {
	t.Helper()
	r.ask("an unknown domain", rlsRequest("foo", "hello", "world"), wantStatus{})
	r.ask("basic key1", rlsRequest("basic", "key1", "foo"), allowed(50, perSecond, 49))
	for _, d := range r.diffs {
		t.Error(d)
	}
	r.diffs = nil

	r.inOneWindow(perMinute, func(try int) {
		key2 = fresh(try)
		for i := range 25 {
			want := allowed(20, perMinute, uint32(20-(i+1)))
			if i >= 20 {
				want = denied(20, perMinute)
			}
			r.ask(fmt.Sprintf("key2 request %d", i+1), rlsRequest("another", "key2", key2), want)
		}
	})

	// The hour's end is a minute's end.
	r.inOneWindow(perMinute, func(try int) {
		twoKeys = fresh(try)
		for i := range 15 {
			k2, k3 := allowed(20, perMinute, uint32(20-(i+1))), allowed(10, perHour, uint32(10-(i+1)))
			if i >= 10 {
				k3 = denied(10, perHour)
				if stopIncrement {
					// Over key3's limit: key2 is not charged.
					k2 = allowed(20, perMinute, 10)
				}
			}
			r.ask(fmt.Sprintf("key2 and key3 request %d", i+1), rlsRequest("another", "key2", twoKeys, "key3", twoKeys), k2, k3)
		}
	})
	return key2, twoKeys
}

// TestEnvoyScenarios replays envoyproxy/ratelimit's integration scenarios.
func TestEnvoyScenarios(t *testing.T) {
	t.Run("basic", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr)
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
	})

	t.Run("headers", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr, "LIMIT_RESPONSE_HEADERS_ENABLED=true")
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil), headers: true}, false)
	})

	t.Run("per-second Redis", func(t *testing.T) {
		t.Parallel()
		addr, secondAddr := testredis.Start(t), testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr, "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+secondAddr)
		key2, _ := basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
		// The limit per minute counted in the main Redis, not in the other.
		for a, want := range map[string]int{addr: 1, secondAddr: 0} {
			if n := keysMatching(t, a, "*"+key2+"*"); n != want {
				t.Errorf("%d keys of key2 in %s, want %d", n, a, want)
			}
		}
	})

	t.Run("cache prefix", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr, "CACHE_KEY_PREFIX=prefix:")
		key2, _ := basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
		if n := keysMatching(t, addr, "prefix:*"+key2+"*"); n != 1 {
			t.Errorf("%d keys prefix:…%s…, want 1", n, key2)
		}
		if n := keysMatching(t, addr, "another*"); n != 0 {
			t.Errorf("%d keys without the prefix, want none", n)
		}
	})

	t.Run("stop-increment", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, true)
	})

	t.Run("auth", func(t *testing.T) {
		t.Parallel()
		addr := testredis.StartWith(t, "--requirepass", "password123")
		secondAddr := testredis.StartWith(t, "--requirepass", "password123")
		s := startRLS(t, "REDIS_URL="+addr, "REDIS_AUTH=password123",
			"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+secondAddr, "REDIS_PERSECOND_AUTH=password123")
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
	})

	t.Run("TLS", func(t *testing.T) {
		t.Parallel()
		r := startTLSRedis(t, "127.0.0.1", "--requirepass", "password123")
		s := startRLS(t, "REDIS_URL="+r.addr, "REDIS_AUTH=password123", "REDIS_TLS=true",
			"REDIS_TLS_CACERT="+r.ca, "REDIS_TLS_CLIENT_CERT="+r.cert, "REDIS_TLS_CLIENT_KEY="+r.key)
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
	})

	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		addrs := testredis.StartCluster(t)
		s := startRLS(t, "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(addrs, ","))
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
	})

	t.Run("Sentinel", func(t *testing.T) {
		t.Parallel()
		sbin, _ := sentinelBin(t)
		master := startRedisProc(t, "redis-server")
		host, port, _ := net.SplitHostPort(master.addr)
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		if err := os.WriteFile(conf, []byte("sentinel monitor mymaster "+host+" "+port+" 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sentinel := startRedisProc(t, sbin, conf)
		s := startRLS(t, "REDIS_TYPE=sentinel", "REDIS_URL=mymaster,"+sentinel.addr)
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, nil)}, false)
	})

	t.Run("reload", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr)
		r := &rlsReplay{t: t, rls: s.client(t, nil)}
		r.ask("reload before its file", rlsRequest("reload", "block", "foo"), wantStatus{})
		file := filepath.Join(s.config, "reload.yaml")
		if err := os.WriteFile(file, []byte(scenarioReloadYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		// A limit of 0 denies every request: once one is denied, the file
		// is loaded.
		r.waitFor("reload.yaml loaded", func(resp *rlspb.RateLimitResponse) bool {
			return resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT
		}, rlsRequest("reload", "block", "foo"))
		r.ask("reload block", rlsRequest("reload", "block", "foo"), denied(0, perSecond))
		r.ask("reload key1", rlsRequest("reload", "key1", "foo"), allowed(50, perSecond, 49))
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		r.waitFor("reload.yaml unloaded", func(resp *rlspb.RateLimitResponse) bool {
			return resp.GetOverallCode() == rlspb.RateLimitResponse_OK
		}, rlsRequest("reload", "block", "foo"))
		r.ask("reload after its file", rlsRequest("reload", "block", "foo"), wantStatus{})
		for _, d := range r.diffs {
			t.Error(d)
		}
	})

	t.Run("share threshold", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		s := startRLS(t, "REDIS_URL="+addr)
		r := &rlsReplay{t: t, rls: s.client(t, nil)}
		// files/* shares one count among its values; files_no_share/*
		// counts each value alone. A run that straddles an hour is run
		// again with a fresh service: the shared count's key is fixed.
		r.inOneWindow(perHour, func(try int) {
			if try > 0 {
				s = startRLS(t, "REDIS_URL="+testredis.Start(t))
				r.rls = s.client(t, nil)
			}
			for i := range 10 {
				r.ask(fmt.Sprintf("files/a.pdf request %d", i+1), rlsRequest("share-threshold-test", "files", "files/a.pdf"), allowed(10, perHour, uint32(9-i)))
			}
			r.ask("files/b.csv", rlsRequest("share-threshold-test", "files", "files/b.csv"), denied(10, perHour))
			for i := range 10 {
				r.ask(fmt.Sprintf("files_no_share value %d", i+1), rlsRequest("share-threshold-test", "files_no_share", "files_no_share/"+fresh(try)), allowed(10, perHour, 9))
			}
		})
	})

	t.Run("mTLS", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		dir := t.TempDir()
		ca, caKey, caPEM, _ := issue(t, nil, nil, "test CA", true, false)
		_, _, srvCert, srvKey := issue(t, ca, caKey, "127.0.0.1", false, false)
		_, _, cliCert, cliKey := issue(t, ca, caKey, "envoy.mesh.local", false, true)
		s := startRLS(t, "REDIS_URL="+addr, "GRPC_SERVER_USE_TLS=true",
			"GRPC_SERVER_TLS_CERT="+writeFile(t, dir, "tls.crt", srvCert), "GRPC_SERVER_TLS_KEY="+writeFile(t, dir, "tls.key", srvKey),
			"GRPC_CLIENT_TLS_CACERT="+writeFile(t, dir, "ca.crt", caPEM), "GRPC_CLIENT_TLS_SAN=envoy.mesh.local")
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		cert, err := tls.X509KeyPair(cliCert, cliKey)
		if err != nil {
			t.Fatal(err)
		}
		basicReplay(t, &rlsReplay{t: t, rls: s.client(t, credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}))}, false)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := s.client(t, credentials.NewTLS(&tls.Config{RootCAs: pool})).ShouldRateLimit(ctx, rlsRequest("basic", "key1", "foo")); err == nil {
			t.Error("a client without a certificate was answered, want refused")
		}
	})

	t.Run("certificate reload", func(t *testing.T) {
		t.Parallel()
		addr := testredis.Start(t)
		dir := t.TempDir()
		ca1, ca1Key, _, _ := issue(t, nil, nil, "first CA", true, false)
		_, _, cert1, key1 := issue(t, ca1, ca1Key, "127.0.0.1", false, false)
		ca2, ca2Key, _, _ := issue(t, nil, nil, "second CA", true, false)
		_, _, cert2, key2 := issue(t, ca2, ca2Key, "127.0.0.1", false, false)
		certFile, keyFile := writeFile(t, dir, "tls.crt", cert1), writeFile(t, dir, "tls.key", key1)
		s := startRLS(t, "REDIS_URL="+addr, "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+certFile, "GRPC_SERVER_TLS_KEY="+keyFile)
		trusts := func(ca *x509.Certificate) bool {
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			c, err := tls.Dial("tcp", s.grpc, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		if !trusts(ca1) || trusts(ca2) {
			t.Fatalf("before the swap: the first CA trusted %v, the second %v; want the first only", trusts(ca1), trusts(ca2))
		}
		// As a rotation writes them: the new files renamed over the old.
		newCert, newKey := writeFile(t, dir, "new.crt", cert2), writeFile(t, dir, "new.key", key2)
		if err := os.Rename(newCert, certFile); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(newKey, keyFile); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the new certificate served", func() bool { return trusts(ca2) })
		if trusts(ca1) {
			t.Error("after the swap the old certificate is still served")
		}
	})
}

// waitFor sends req until its response satisfies cond, for 60s at most:
// the service reloads on its own time.
func (r *rlsReplay) waitFor(what string, cond func(*rlspb.RateLimitResponse) bool, req *rlspb.RateLimitRequest) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
		resp, err := r.rls.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			r.t.Fatalf("%s: %v", what, err)
		}
		if cond(resp) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not %s after 60s: %v", what, resp)
		}
		time.Sleep(50 * time.Millisecond) // the service polls its files on its own time
	}
}

// writeFile writes data to dir/name and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// keysMatching counts the keys of pattern in the Redis at addr.
func keysMatching(t *testing.T, addr, pattern string) int {
	t.Helper()
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	keys, err := rc.Keys(t.Context(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}
