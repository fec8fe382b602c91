package main

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const statsdServeYAML = `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// In envoy mode, sluice serve sends envoyproxy/ratelimit's statistics to
// STATSD_HOST:STATSD_PORT over TCP without being asked, EXTRA_TAGS
// appended to each name.
func TestServeEnvoyStatsd(t *testing.T) {
	lines := make(chan string, 1024)
	host, port, _ := net.SplitHostPort(statsdListen(t, false, func(l string) { lines <- l }))
	withEnv(t, "STATSD_HOST", host, "STATSD_PORT", port, "EXTRA_TAGS", "env:ci", "STATS_FLUSH_INTERVAL", "20ms")
	s := startServe(t, "-config", writeConfig(t, statsdServeYAML), "-redis", "")

	shopRequests(t, s.addr("grpc"), 3)
	// The limit is 2 a minute and near_limit starts past floor(2 × 0.8):
	// the second request is near, the third over.
	want := map[string]int{
		"ratelimit.service.rate_limit.shop.user.total_hits.__env=ci":   3,
		"ratelimit.service.rate_limit.shop.user.within_limit.__env=ci": 2,
		"ratelimit.service.rate_limit.shop.user.near_limit.__env=ci":   1,
		"ratelimit.service.rate_limit.shop.user.over_limit.__env=ci":   1,
		"ratelimit.service.config_load_success.__env=ci":               1,
		"ratelimit_server.ShouldRateLimit.total_requests.__env=ci":     3,
	}
	got := map[string]int{}
	deadline := time.After(30 * time.Second)
	for !maps.Equal(got, want) {
		select {
		case l := <-lines:
			name, rest, _ := strings.Cut(l, ":")
			if runtimeStat(name) {
				continue
			}
			if v, ok := strings.CutSuffix(rest, "|c"); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("line %q: not a counter", l)
				}
				got[name] += n
			}
		case <-deadline:
			t.Fatalf("statsd received %v, want %v", got, want)
		}
	}
}

// Under USE_PROMETHEUS, sluice serve shows envoyproxy/ratelimit's
// statistics at PROMETHEUS_ADDR and PROMETHEUS_PATH under the names its
// default mapper gives them, beside sluice's own series.
func TestServeEnvoyPrometheus(t *testing.T) {
	withEnv(t, "USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:0", "PROMETHEUS_PATH", "/prom",
		"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true")
	s := startServe(t, "-config", writeConfig(t, statsdServeYAML), "-redis", "")

	shopRequests(t, s.addr("grpc"), 3)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.addr("metrics")+"/prom", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET PROMETHEUS_ADDR/prom: %d, %v", resp.StatusCode, err)
	}
	text := string(body)
	// As in TestServeEnvoyStatsd: the second request is near, the third over.
	want := []string{
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_rate_limit_near_limit{domain="shop",key1="user"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="shop",key1="user"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="shop",key1="user"} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="shop",key1="user"} 2`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 3`,
	}
	var got []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, "ratelimit_") && !strings.Contains(l, "_bucket{") && !strings.Contains(l, "_sum{") && !runtimeStat(strings.ReplaceAll(l, "_", ".")) {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("envoyproxy/ratelimit's series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(text, `sluice_decisions_total{domain="shop"`) {
		t.Error("no sluice_decisions_total beside them")
	}
}

// runtimeStat says whether a statsd name, or a Prometheus one with its
// "_" made ".", is of the Go runtime's or the Redis pool's statistics:
// their values vary, and TestEnvoyScenariosStats checks them.
func runtimeStat(name string) bool {
	return strings.HasPrefix(name, "ratelimit.go.") || strings.HasPrefix(name, "ratelimit.redis.pool.") || strings.HasPrefix(name, "ratelimit.redis_pool.")
}

// shopRequests sends n requests for user a of the shop domain to the
// gRPC address.
func shopRequests(t *testing.T, addr string, n int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}},
		}})
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
}

// Under USE_DOG_STATSD, the mogrifiers USE_DOG_STATSD_MOGRIFIERS names
// rename and tag what sluice serve sends, as envoyproxy/ratelimit's do.
func TestServeDogStatsdMogrifiers(t *testing.T) {
	lines := make(chan string, 1024)
	host, port, _ := net.SplitHostPort(statsdListen(t, true, func(l string) { lines <- l }))
	withEnv(t, "USE_STATSD", "false", "USE_DOG_STATSD", "true", "STATSD_HOST", host, "STATSD_PORT", port,
		"EXTRA_TAGS", "env:ci", "STATS_FLUSH_INTERVAL", "20ms",
		"USE_DOG_STATSD_MOGRIFIERS", "rpc,limits",
		"DOG_STATSD_MOGRIFIER_RPC_PATTERN", `^ratelimit_server\.(.*)\.total_requests$`,
		"DOG_STATSD_MOGRIFIER_RPC_NAME", "rpc.calls",
		"DOG_STATSD_MOGRIFIER_RPC_TAGS", "method:$1",
		"DOG_STATSD_MOGRIFIER_LIMITS_PATTERN", `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`,
		"DOG_STATSD_MOGRIFIER_LIMITS_NAME", "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_LIMITS_TAGS", "domain:$1,descriptor:$2")
	s := startServe(t, "-config", writeConfig(t, statsdServeYAML), "-redis", "")
	shopRequests(t, s.addr("grpc"), 3)
	tags := "|#env:ci,domain:shop,descriptor:user"
	want := map[string]int{
		"ratelimit.service.rate_limit.total_hits" + tags:   3,
		"ratelimit.service.rate_limit.within_limit" + tags: 2,
		"ratelimit.service.rate_limit.near_limit" + tags:   1,
		"ratelimit.service.rate_limit.over_limit" + tags:   1,
		"ratelimit.service.config_load_success|#env:ci":    1,
		"rpc.calls|#env:ci,method:ShouldRateLimit":         3,
	}
	got := map[string]int{}
	deadline := time.After(30 * time.Second)
	for !maps.Equal(got, want) {
		select {
		case l := <-lines:
			name, rest, _ := strings.Cut(l, ":")
			if runtimeStat(name) {
				continue
			}
			value, tags, _ := strings.Cut(rest, "|c")
			if n, err := strconv.Atoi(value); err == nil && strings.HasPrefix(rest, value+"|c") {
				got[name+tags] += n
			}
		case <-deadline:
			t.Fatalf("DogStatsD received %v, want %v", got, want)
		}
	}
}

// Under USE_PROMETHEUS, PROMETHEUS_MAPPER_YAML's statsd_exporter mapping
// names envoyproxy/ratelimit's series in place of the default mapper's.
func TestServeEnvoyPrometheusMapper(t *testing.T) {
	mapping := filepath.Join(t.TempDir(), "mapper.yaml")
	if err := os.WriteFile(mapping, []byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.*"
    name: "shop_$3"
    labels:
      descriptor: "$2"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	withEnv(t, "USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:0", "PROMETHEUS_MAPPER_YAML", mapping)
	s := startServe(t, "-config", writeConfig(t, statsdServeYAML), "-redis", "")
	shopRequests(t, s.addr("grpc"), 3)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.addr("metrics")+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET PROMETHEUS_ADDR/metrics: %d, %v", resp.StatusCode, err)
	}
	var got []string
	for l := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(l, "shop_") || strings.HasPrefix(l, "ratelimit_service_rate_limit") {
			got = append(got, l)
		}
	}
	want := []string{
		`shop_near_limit{descriptor="user"} 1`,
		`shop_over_limit{descriptor="user"} 1`,
		`shop_total_hits{descriptor="user"} 3`,
		`shop_within_limit{descriptor="user"} 2`,
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("mapped series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// statsdListen is a statsd on a free loopback port, over UDP (DogStatsD)
// or TCP, until t ends: it returns its address, and has add called with
// each line it receives, from several goroutines at once.
func statsdListen(t *testing.T, udp bool, add func(line string)) (addr string) {
	t.Helper()
	if udp {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				for l := range strings.SplitSeq(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
					add(l)
				}
			}
		}()
		return pc.LocalAddr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					add(sc.Text())
				}
			}()
		}
	}()
	return ln.Addr().String()
}
