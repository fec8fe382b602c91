package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/testredis"
)

// freePort asks the kernel for a port nobody listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// child is a "sluice serve" process of its own.
type child struct {
	cmd    *exec.Cmd
	banner map[string]string
	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{}
}

func (c *child) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// startChild runs sluice serve with args in a process whose environment
// is env and nothing else, and waits for its banner.
func startChild(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append([]string{serveArgsEnv + "=" + strings.Join(append([]string{"serve"}, args...), "\n")}, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, banner: map[string]string{}, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
		}
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	// A process that prints no banner within 30s is killed, which ends
	// the wait for it.
	late := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			c.banner[f[0]] = strings.Join(f[1:], " ")
		}
		if len(f) > 0 && f[0] == "shadow" {
			break
		}
	}
	late.Stop()
	go io.Copy(io.Discard, out)
	if c.banner["shadow"] == "" {
		cmd.Process.Kill()
		<-c.done
		t.Fatalf("sluice serve printed no banner within 30s:\n%s", c.log())
	}
	return c
}

// stop sends SIGTERM and checks that the process exits 0.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("sluice serve after SIGTERM: %v\n%s", err, c.log())
	}
}

// stableWindow waits, if the current window of period ends within
// margin, until the next one begins, so that a sequence of requests
// counted in a fixed window is counted in one. It is a wait for the wall
// clock, not an assertion on it.
func stableWindow(period, margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(period).Add(period).Sub(now); left < margin {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// writeRuntime writes one version of envoyproxy/ratelimit's runtime
// directory: root/version/ratelimit/config/<name>.
func writeRuntime(t *testing.T, root, version string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, version, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, version)
}

// swapSymlink points link at target atomically, as a deployment that
// swaps runtime versions does.
func swapSymlink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// The config files are envoyproxy/ratelimit's: no sluice extension.
const envoyRunV1 = `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    value: /health
    rate_limit:
      unlimited: true
`

const envoyRunV2 = `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 5
`

const envoyRunV2Extra = `domain: search
descriptors:
  - key: client
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// sluice serve with only envoyproxy/ratelimit's environment, a runtime
// directory laid out as it expects and a real redis-server: the ports,
// the limits counted in Redis, the response headers, /healthcheck, the
// metrics and admin (debug port) listeners, and a reload by a symlink swap of
// RUNTIME_ROOT.
func TestEnvoyRun(t *testing.T) {
	redisAddr := testredis.Start(t)
	root := t.TempDir()
	v1 := writeRuntime(t, root, "v1", map[string]string{"config.yaml": envoyRunV1})
	v2 := writeRuntime(t, root, "v2", map[string]string{"config.yaml": envoyRunV2, "search.yaml": envoyRunV2Extra})
	current := filepath.Join(root, "current")
	swapSymlink(t, v1, current)

	port, grpcPort, debugPort, promPort := freePort(t), freePort(t), freePort(t), freePort(t)
	env := []string{
		"RUNTIME_ROOT=" + current,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=true",
		"RUNTIME_IGNOREDOTFILES=true",
		"HOST=127.0.0.1", "PORT=" + port,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + promPort,
		"USE_STATSD=false",
		"LOG_LEVEL=info",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
	}
	c := startChild(t, env)
	if got := strings.Fields(c.banner["http"])[0]; got != "127.0.0.1:"+port {
		t.Errorf("http on %s, want PORT %s", got, port)
	}
	if got := strings.Fields(c.banner["grpc"])[0]; got != "127.0.0.1:"+grpcPort {
		t.Errorf("grpc on %s, want GRPC_PORT %s", got, grpcPort)
	}
	if !strings.HasPrefix(c.banner["store"], "redis redis://"+redisAddr) || c.banner["domains"] != "shop" || c.banner["headers"] != "envoy" {
		t.Errorf("banner: %v", c.banner)
	}
	if !strings.Contains(c.log(), "envoy mode") || !strings.Contains(c.log(), "RUNTIME_WATCH_ROOT=true: sluice checks") {
		t.Errorf("the log does not say envoy mode, nor name what differs:\n%s", c.log())
	}

	httpGet := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := httpGet("http://127.0.0.1:" + port + "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}

	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	ask := func(domain string, kv ...string) *rlspb.RateLimitResponse {
		t.Helper()
		req := &rlspb.RateLimitRequest{Domain: domain}
		for i := 0; i+1 < len(kv); i += 2 {
			req.Descriptors = append(req.Descriptors, &ratelimitpb.RateLimitDescriptor{
				Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
			})
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	stableWindow(time.Hour, 20*time.Second)
	user := fmt.Sprintf("u%d", time.Now().UnixNano()) // the window may hold another run's counts
	for i, want := range []struct {
		code rlspb.RateLimitResponse_Code
		left uint32
	}{{rlspb.RateLimitResponse_OK, 2}, {rlspb.RateLimitResponse_OK, 1}, {rlspb.RateLimitResponse_OK, 0}, {rlspb.RateLimitResponse_OVER_LIMIT, 0}} {
		resp := ask("shop", "user", user)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != want.code || st.GetLimitRemaining() != want.left || st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Errorf("request %d: %v, want %v with %d left of 3", i+1, resp, want.code, want.left)
		}
		// duration_until_reset in whole seconds, rounded up, as
		// envoyproxy/ratelimit answers it.
		if d := st.GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() < 1 || d.GetSeconds() > 3600 {
			t.Errorf("request %d: duration_until_reset %v, want whole seconds within the hour", i+1, d.AsDuration())
		}
		// envoyproxy/ratelimit's headers, and only those.
		h := headerMap(resp)
		reset, _ := strconv.Atoi(h["RateLimit-Reset"])
		if len(h) != 3 || h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != strconv.Itoa(int(want.left)) || reset < 1 || reset > 3600 {
			t.Errorf("request %d: headers %v", i+1, h)
		}
	}
	if resp := ask("shop", "path", "/health"); resp.GetOverallCode() != rlspb.RateLimitResponse_OK || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("unlimited: %v", resp)
	}
	// POST /json shares the counts: 429.
	body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":%q}]}]}`, user)
	resp, err := http.Post("http://127.0.0.1:"+port+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	jsonBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("POST /json over the limit: %d, want 429", resp.StatusCode)
	}
	var jr rlspb.RateLimitResponse
	if err := protojson.Unmarshal(jsonBody, &jr); err != nil {
		t.Errorf("POST /json: %v\n%s", err, jsonBody)
	} else if d := jr.GetStatuses()[0].GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() < 1 {
		t.Errorf("POST /json: duration_until_reset %v, want whole seconds: %s", d.AsDuration(), jsonBody)
	}
	// The counts are in the redis-server.
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rc.Close()
	// ... in the keys envoyproxy/ratelimit names (no CACHE_KEY_PREFIX:
	// none), so that its pods and sluice's count together during a
	// rolling swap: every hit, the two denied too, as it counts them.
	hour := strconv.FormatInt(time.Now().Unix()/3600*3600, 10)
	if n, err := rc.Get(t.Context(), "shop_user_"+user+"_"+hour).Int64(); err != nil || n != 5 {
		t.Errorf("envoyproxy/ratelimit's key for the user: %d, %v; want 5", n, err)
	}
	// A user an old envoyproxy/ratelimit pod has counted twice this hour
	// has one request left here.
	old := user + "-old"
	rc.Pipelined(t.Context(), func(p goredis.Pipeliner) error {
		p.IncrBy(t.Context(), "shop_user_"+old+"_"+hour, 2)
		p.Expire(t.Context(), "shop_user_"+old+"_"+hour, time.Hour)
		return nil
	})
	if st := ask("shop", "user", old).GetStatuses()[0]; st.GetCode() != rlspb.RateLimitResponse_OK || st.GetLimitRemaining() != 0 {
		t.Errorf("a user counted twice by envoyproxy/ratelimit: %v, want OK with 0 left", st)
	}
	if st := ask("shop", "user", old).GetStatuses()[0]; st.GetCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("and again: %v, want OVER_LIMIT", st)
	}

	// The metrics listener (PROMETHEUS_ADDR) and the debug port, the admin one.
	if code, body := httpGet("http://127.0.0.1:" + promPort + "/metrics"); code != 200 || !strings.Contains(body, `sluice_decisions_total{domain="shop"`) {
		t.Errorf("PROMETHEUS_ADDR /metrics: %d", code)
	}
	// DEBUG_PORT is sluice's admin listener: the console and its JSON.
	if code, body := httpGet("http://127.0.0.1:" + debugPort + "/v1/policy"); code != 200 || !strings.Contains(body, `"shop"`) {
		t.Errorf("DEBUG_PORT /v1/policy: %d %.200s", code, body)
	}

	// Reload: RUNTIME_ROOT's symlink now points at v2.
	swapSymlink(t, v2, current)
	deadline := time.Now().Add(60 * time.Second)
	for ask("search", "client", "c").GetStatuses()[0].GetCurrentLimit() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("v2 not loaded 60s after the symlink swap:\n%s", c.log())
		}
		time.Sleep(50 * time.Millisecond) // the service polls on its own time
	}
	if st := ask("shop", "user", user+"-v2").GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 4 {
		t.Errorf("after the swap: %v, want 4 left of 5", st)
	}
	if resp := ask("shop", "path", "/health"); resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("/health is no longer unlimited in v2: %v", resp)
	}
	c.stop(t)
}

// headerMap is a response's response_headers_to_add.
func headerMap(resp *rlspb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}
