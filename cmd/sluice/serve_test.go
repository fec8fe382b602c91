package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testredis"
)

// serving is a "sluice serve" running in the test's process.
type serving struct {
	banner map[string]string // "http", "grpc", "store", ... from stdout
	logs   chan string       // stderr, line by line
	cancel context.CancelFunc
	code   chan int
}

// startServe runs sluice serve with args on loopback ports until its
// banner is printed.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	s := &serving{banner: map[string]string{}, logs: make(chan string, 1000), cancel: cancel, code: make(chan int, 1)}
	// The Redis store's default deadline, 50ms, is a bound a loaded
	// machine can miss, and a call that misses it fails open: a flag of
	// the test's own after these puts it back.
	args = append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-redis-timeout", testRedisTimeout}, args...)
	go func() {
		s.code <- run(ctx, args, testEnv, outW, errW)
		outW.Close()
		errW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			select {
			case s.logs <- sc.Text():
			default: // a test that does not read the log does not block the server
			}
		}
		close(s.logs)
	}()
	// A banner not printed within 30s ends the wait for it.
	late := time.AfterFunc(30*time.Second, func() { outR.CloseWithError(errors.New("no banner after 30s")) })
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			s.banner[f[0]] = strings.Join(f[1:], " ")
		}
		if len(f) > 0 && f[0] == "shadow" {
			break // the banner's last line
		}
	}
	late.Stop()
	go io.Copy(io.Discard, outR)
	if s.banner["http"] == "" {
		cancel()
		select {
		case code := <-s.code:
			t.Fatalf("sluice serve printed no banner (%v); exit %d", sc.Err(), code)
		case <-time.After(time.Minute):
			t.Fatalf("sluice serve printed no banner (%v), and did not exit within a minute of its context's end", sc.Err())
		}
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// runServeOwnPorts runs sluice serve with args to its end, on loopback
// ports of its own unless args name others: a serve that the tests expect
// to fail must not fail on the default ports, which a running sluice
// serve holds.
func runServeOwnPorts(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runArgs(t, append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...)...)
}

// stop cancels the context (SIGTERM) and checks that serve exits 0,
// within a minute.
func (s *serving) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case code, ok := <-s.code:
		if ok {
			close(s.code)
			if code != exitOK {
				t.Errorf("sluice serve exited %d, want 0", code)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("sluice serve did not exit within a minute of its context's end")
	}
}

// waitLog reads the log until a line contains want, for 30s at most.
func (s *serving) waitLog(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-s.logs:
			if !ok {
				t.Fatalf("the log ended without %q", want)
			}
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q in the log after 30s", want)
		}
	}
}

func (s *serving) addr(name string) string { return strings.Fields(s.banner[name])[0] }

// postJSON posts a one-descriptor request and returns the status.
func (s *serving) postJSON(t *testing.T, domain, key, value string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, domain, key, value)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.addr("http")+"/json", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const serveYAML = `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// With no flags but the addresses, serve starts at once on the built-in
// policy and the memory store, and says so.
func TestServeDefault(t *testing.T) {
	s := startServe(t)
	for k, want := range map[string]string{"config": "the built-in policy", "domains": "sluice", "store": "memory", "shadow": "off"} {
		if s.banner[k] != want {
			t.Errorf("banner %s: %q, want %q", k, s.banner[k], want)
		}
	}
	resp, err := http.Get("http://" + s.addr("http") + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := s.postJSON(t, "sluice", "remote_address", "192.0.2.1"); code != 200 || !strings.Contains(body, `"per_ip"`) {
		t.Errorf("/json: %d %s", code, body)
	}
	conn, err := grpc.NewClient(s.addr("grpc"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{
		Domain: "sluice",
		Descriptors: []*ratelimitpb.RateLimitDescriptor{{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}},
		}},
	})
	if err != nil || r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 99 {
		t.Errorf("ShouldRateLimit: %v, %v; want OK with 99 left", r, err)
	}
}

func TestServeConfig(t *testing.T) {
	s := startServe(t, "-config", writeConfig(t, serveYAML), "-shadow")
	if s.banner["domains"] != "shop" || !strings.HasPrefix(s.banner["shadow"], "on") {
		t.Errorf("banner: %v", s.banner)
	}
	for range 3 {
		if code, body := s.postJSON(t, "shop", "user", "u"); code != 200 {
			t.Errorf("shadow mode: %d %s, want 200", code, body)
		}
	}
}

// SIGHUP reloads the config at once.
func TestServeSIGHUP(t *testing.T) {
	path := writeConfig(t, serveYAML)
	s := startServe(t, "-config", path, "-poll", "0")
	stableWindow(time.Minute, 10*time.Second) // serve's clock is the machine's
	s.postJSON(t, "shop", "user", "u")
	s.postJSON(t, "shop", "user", "u")
	if code, _ := s.postJSON(t, "shop", "user", "u"); code != 429 {
		t.Fatalf("3rd request: %d, want 429", code)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(serveYAML, "unit: minute", "unit: second", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "config reloaded")
	if code, body := s.postJSON(t, "shop", "user", "u"); code != 200 || !strings.Contains(body, `"SECOND"`) {
		t.Errorf("after SIGHUP: %d %s, want 200 under the per-second limit", code, body)
	}
}

func TestServeErrors(t *testing.T) {
	bad := writeConfig(t, "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 2\n")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-config", bad}, exitFail, bad + ":5: descriptors[0].rate_limit.unit: unknown unit \"fortnight\""},
		{[]string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, exitFail, "no such file"},
		{[]string{"-http", busy.Addr().String()}, exitFail, "-http:"},
		{[]string{"-http", "127.0.0.1:0", "-grpc", busy.Addr().String()}, exitFail, "-grpc:"},
		{[]string{"limits.yaml"}, exitUsage, `unexpected argument "limits.yaml"`},
		{[]string{"-drain", "-1s"}, exitUsage, "-drain -1s must not be negative"},
		{[]string{"-poll", "-1s"}, exitUsage, "-poll -1s must not be negative"},
		{[]string{"-redis", "http://nowhere"}, exitUsage, "-redis:"},
		{[]string{"-trusted-proxies", "10.0.0.0/33"}, exitUsage, `"10.0.0.0/33": want a CIDR prefix`},
		{[]string{"-config"}, exitUsage, "flag needs an argument: -config"},
		{[]string{"-read-timeout", "0s"}, exitUsage, "-read-timeout 0s must be positive"},
		{[]string{"-idle-timeout", "-5s"}, exitUsage, "-idle-timeout -5s must be positive"},
		{[]string{"-max-memory", "0"}, exitUsage, `"0": want a positive size`},
		{[]string{"-max-memory", "lots"}, exitUsage, `"lots": want a positive size`},
		{[]string{"-max-memory", "-1MiB"}, exitUsage, `"-1MiB": want a positive size`},
		{[]string{"-max-memory", "99999999999GiB"}, exitUsage, `"99999999999GiB": want a positive size`},
		{[]string{"-max-memory", "1KiB"}, exitUsage, "-max-memory: memory:"},
		{[]string{"-verbose"}, exitUsage, "flag provided but not defined: -verbose"},
		{[]string{"-redis", "redis://a:1", "-redis-cluster", "b:1"}, exitUsage, "-redis and -redis-cluster: name one Redis"},
		{[]string{"-redis-cluster", "b"}, exitUsage, `-redis-cluster: "b": want host:port`},
		{[]string{"-redis-sentinel", "s1:26379"}, exitUsage, `-redis-sentinel: "s1:26379": want MASTER@HOST:PORT`},
		{[]string{"-redis-tls-ca", "ca.pem", "-redis", "redis://a:1"}, exitUsage, "-redis-tls-*: set -redis-tls too"},
		{[]string{"-redis-prefix", "{x}", "-redis", "redis://a:1"}, exitUsage, "-redis-prefix: redis: prefix"},
		{[]string{"-grpc-tls-cert", "tls.crt"}, exitUsage, "-grpc-tls-cert and -grpc-tls-key: TLS needs both"},
		{[]string{"-http-tls-cert", "c", "-http-tls-key", "k", "-http-tls-client-san", "x"}, exitUsage, "-http-tls-client-san needs -http-tls-client-ca"},
		{[]string{"-grpc-tls-cert", "missing.crt", "-grpc-tls-key", "missing.key"}, exitFail, "server: gRPC: TLS certificate: open missing.crt"},
		{[]string{"-response-headers", "x-ratelimit"}, exitUsage, `-response-headers: "x-ratelimit": want ietf, envoy or none`},
		{[]string{"-response-headers", "envoy", "-limit-header", "Bad Name"}, exitFail, `"Bad Name" is not a valid header name`},
		{[]string{"-log-level", "loud"}, exitUsage, `-log-level "loud"`},
		{[]string{"-log-format", "xml"}, exitUsage, `-log-format "xml": want text or json`},
		{[]string{"-metrics-path", "metrics"}, exitUsage, `-metrics-path "metrics": want a path`},
		{[]string{"-redis-pool-size", "-1"}, exitUsage, "-redis-pool-size -1 must be 0 to 10000"},
		{[]string{"-redis-pool-size", "2147483648"}, exitUsage, "-redis-pool-size 2147483648 must be 0 to 10000"},
		{[]string{"-redis-max-inflight", "0"}, exitUsage, "-redis-max-inflight 0 must be at least 1"},
		{[]string{"-redis-persecond", "redis://a:1"}, exitUsage, "-redis-persecond: a per-second Redis beside no main one"},
		{[]string{"-redis", "redis://a:1", "-redis-persecond", "redis://b:1", "-redis-persecond-cluster", "c:1"}, exitUsage, "-redis-persecond and -redis-persecond-cluster: name one Redis"},
		{[]string{"-redis", "redis://a:1", "-redis-persecond-sentinel", "s1:26379"}, exitUsage, `-redis-persecond-sentinel: "s1:26379": want MASTER@HOST:PORT`},
		{[]string{"-redis", "redis://a:1", "-redis-persecond", "redis://b:1", "-redis-persecond-tls-ca", "ca.pem"}, exitUsage, "-redis-persecond-tls-*: set -redis-persecond-tls too"},
		{[]string{"-redis-persecond-pool-size", "-2"}, exitUsage, "-redis-persecond-pool-size -2 must be 0 to 10000"},
		{[]string{"-redis-persecond-pool-size", "10001"}, exitUsage, "-redis-persecond-pool-size 10001 must be 0 to 10000"},
		{[]string{"-metrics", busy.Addr().String()}, exitFail, "-metrics:"},
		{[]string{"-grpc-recv-timeout", "0s"}, exitUsage, "-grpc-recv-timeout 0s must be positive and at most 1h0m0s"},
		{[]string{"-grpc-recv-timeout", "-1s"}, exitUsage, "-grpc-recv-timeout -1s must be positive"},
		{[]string{"-grpc-recv-timeout", "2h"}, exitUsage, "-grpc-recv-timeout 2h0m0s must be positive and at most 1h0m0s"},
		{[]string{"-grpc-max-streams", "0"}, exitUsage, "-grpc-max-streams 0 must be between 1 and 1048576"},
		{[]string{"-grpc-max-streams", "-5"}, exitUsage, "-grpc-max-streams -5 must be between 1 and 1048576"},
		{[]string{"-grpc-max-streams", "99999999"}, exitUsage, "-grpc-max-streams 99999999 must be between 1 and 1048576"},
		{[]string{"-grpc-max-connections", "0"}, exitUsage, "-grpc-max-connections 0 must be between 1 and 1048576"},
		{[]string{"-http-max-connections", "2000000"}, exitUsage, "-http-max-connections 2000000 must be between 1 and 1048576"},
		{[]string{"-grpc-max-connection-idle", "-1m"}, exitUsage, "-grpc-max-connection-idle -1m0s must not be negative"},
		{[]string{"-grpc-max-streams", "many"}, exitUsage, `invalid value "many" for flag -grpc-max-streams`},
		{[]string{"-rlqs-abandon-after", "0s"}, exitUsage, "-rlqs-abandon-after 0s must be positive"},
	}
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runServeOwnPorts(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) || stdout != "" {
				t.Errorf("sluice serve %s: exit %d, stdout %q, stderr %q; want exit %d saying %q", name, code, stdout, stderr, tt.code, tt.want)
			}
		})
	}
}

// With -redis the counts are in a real Redis, which the test starts.
// startRedis starts a redis-server of the test's own on a free port.
func startRedis(t *testing.T) (port string) {
	t.Helper()
	_, port, _ = strings.Cut(testredis.Start(t), ":")
	return port
}

func TestServeRedis(t *testing.T) {
	port := startRedis(t)
	url := "redis://:secret-not-shown@127.0.0.1:" + port + "/0"
	s := startServe(t, "-config", writeConfig(t, serveYAML), "-redis", url)
	if want := "redis redis://:xxxxx@127.0.0.1:" + port + "/0"; s.banner["store"] != want {
		t.Errorf("banner store %q, want %q", s.banner["store"], want)
	}
	// redis-server has no password: AUTH fails, and the rules fail open.
	// That is the failure path; the next server counts for real.
	if code, _ := s.postJSON(t, "shop", "user", "u"); code != 200 {
		t.Errorf("store failing, fail-open rule: %d, want 200", code)
	}
	s.stop(t)

	s = startServe(t, "-config", writeConfig(t, serveYAML), "-redis", "redis://127.0.0.1:"+port+"/0")
	user := fmt.Sprintf("u%d", time.Now().UnixNano()) // the window may hold another run's counts
	stableWindow(time.Minute, 10*time.Second)
	for i, want := range []int{200, 200, 429} {
		if code, body := s.postJSON(t, "shop", "user", user); code != want {
			t.Errorf("request %d: %d %s, want %d", i+1, code, body, want)
		}
	}
}

// serveArgsEnv makes the test binary run "sluice serve" instead of the
// tests: TestServeTwoProcesses starts real processes that way.
const serveArgsEnv = "SLUICE_TEST_SERVE_ARGS"

// redisDefaultsEnv, set, keeps the Redis store's defaults in such a
// process: the floods test the service as it is shipped.
const redisDefaultsEnv = "SLUICE_TEST_REDIS_DEFAULTS"

// testRedisTimeout is the Redis store's deadline in the tests' serve and
// in the processes TestServeTwoProcesses starts: the default, 50ms, is a
// bound a loaded machine can miss, and a call that misses it fails open.
const testRedisTimeout = "10s"

func TestMain(m *testing.M) {
	if args := os.Getenv(serveArgsEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		argv := strings.Split(args, "\n")
		if os.Getenv(redisDefaultsEnv) == "" && len(argv) > 0 {
			argv = append([]string{argv[0], "-redis-timeout", testRedisTimeout}, argv[1:]...)
		}
		os.Exit(run(ctx, argv, os.LookupEnv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// Two sluice serve processes on one redis-server enforce one limit between
// them: requests alternate between the two, and exactly the limit passes.
func TestServeTwoProcesses(t *testing.T) {
	port := startRedis(t)
	cfg := writeConfig(t, `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 7
`)
	var addrs []string
	for range 2 {
		_, banner := serveProcess(t, "-config", cfg, "-redis", "redis://127.0.0.1:"+port+"/0")
		addrs = append(addrs, banner["http"])
	}
	user := fmt.Sprintf("u%d", time.Now().UnixNano())
	body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":%q}]}]}`, user)
	stableWindow(time.Hour, 20*time.Second)
	allowed := 0
	for i := range 20 {
		resp, err := http.Post("http://"+addrs[i%2]+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d to process %d: status %d", i, i%2, resp.StatusCode)
		}
	}
	if allowed != 7 {
		t.Errorf("two processes allowed %d of 20 requests, want exactly the limit, 7", allowed)
	}
}

// -grpc-uds (GRPC_UDS) serves gRPC on a unix socket instead.
func TestServeGRPCUDS(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	s := startServe(t, "-config", writeConfig(t, serveYAML), "-grpc-uds", sock)
	if got := s.addr("grpc"); got != sock {
		t.Errorf("banner grpc %q, want %q", got, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{
		Domain:      "shop",
		Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "uds"}}}},
	})
	if err != nil || r.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Errorf("over the unix socket: %v, %v", r, err)
	}
}

// -http-allowed-hosts holds POST /json to the names given (and IP
// addresses): another Host is 421; a name with a port is a usage error.
func TestServeHTTPAllowedHosts(t *testing.T) {
	if code, _, stderr := runServeOwnPorts(t, "-http-allowed-hosts", "ratelimit.internal:8080"); code != exitUsage || !strings.Contains(stderr, "without a port") {
		t.Errorf("-http-allowed-hosts with a port: exit %d, stderr %q; want a usage error", code, stderr)
	}
	s := startServe(t, "-http-allowed-hosts", "ratelimit.internal, rl.svc")
	post := func(host string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.addr("http")+"/json",
			strings.NewReader(`{"domain":"sluice","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.9"}]}]}`))
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{"rebound.example": 421, "rl.svc:8080": 200, "ratelimit.internal": 200, s.addr("http"): 200} {
		if got := post(host); got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
}

// The message of a failure to start is chosen by the error's type: a
// config that does not load says so and lists its problems; a setting the
// server cannot use (TLS files) is named alone.
func TestServeFailureMessages(t *testing.T) {
	base := []string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", ""}
	bad := writeConfig(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n")
	code, _, stderr := runArgs(t, append(base, "-config", bad)...)
	if code != exitFail || !strings.Contains(stderr, "sluice serve: the config does not load:\n") || !strings.Contains(stderr, "rate_limt") {
		t.Errorf("serve -config with an unknown field: exit %d, stderr %q; want 1, the config named as not loading, and the field", code, stderr)
	}
	code, _, stderr = runArgs(t, append(base, "-grpc-tls-cert", "missing.crt", "-grpc-tls-key", "missing.key")...)
	if code != exitFail || !strings.Contains(stderr, "sluice serve: server: gRPC: TLS certificate") || strings.Contains(stderr, "does not load") {
		t.Errorf("serve with missing TLS files: exit %d, stderr %q; want 1 and the files named, not the config", code, stderr)
	}
}

// -redis-timeout is the Redis store's deadline: 50ms unless set, and
// positive, since the service adds no deadline of its own, and at most a
// minute; -redis-persecond-timeout the per-second one's, the same bounds.
func TestServeRedisTimeoutFlag(t *testing.T) {
	v, src, _ := printed(t, nil)
	if v["redis-timeout"] != "50ms" || src["redis-timeout"] != "default" {
		t.Errorf("-print-config: -redis-timeout %q from %q, want 50ms from default", v["redis-timeout"], src["redis-timeout"])
	}
	v, src, _ = printed(t, nil, "-redis-timeout", "2s")
	if v["redis-timeout"] != "2s" || src["redis-timeout"] != "flag -redis-timeout" {
		t.Errorf("-print-config -redis-timeout 2s: %q from %q", v["redis-timeout"], src["redis-timeout"])
	}
	for _, arg := range []string{"0", "-1s", "61s"} {
		code, _, stderr := runServeOwnPorts(t, "-redis-timeout", arg)
		if code != exitUsage || !strings.Contains(stderr, "must be positive") {
			t.Errorf("serve -redis-timeout %s: exit %d, stderr %q; want 2 and why", arg, code, stderr)
		}
	}
	for _, arg := range []string{"-1s", "2h0m0s"} {
		code, _, stderr := runServeOwnPorts(t, "-redis-persecond-timeout", arg)
		if code != exitUsage || !strings.Contains(stderr, "-redis-persecond-timeout "+arg+" must be positive and at most 1m0s") {
			t.Errorf("serve -redis-persecond-timeout %s: exit %d, stderr %q; want 2 and why", arg, code, stderr)
		}
	}
}
