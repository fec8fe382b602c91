package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testredis"
)

// The statistics of the basic scenario, as envoyproxy/ratelimit sends
// them to statsd (the counters under its service's names) and as its
// default mapper shows them to Prometheus.
var (
	basicStatsd = map[string]int{
		"ratelimit.service.config_load_success":                  1,
		"ratelimit.service.rate_limit.foo.domain_not_found":      1,
		"ratelimit.service.rate_limit.basic.key1.total_hits":     1,
		"ratelimit.service.rate_limit.basic.key1.within_limit":   1,
		"ratelimit.service.rate_limit.another.key2.total_hits":   40,
		"ratelimit.service.rate_limit.another.key2.within_limit": 35,
		"ratelimit.service.rate_limit.another.key2.near_limit":   4,
		"ratelimit.service.rate_limit.another.key2.over_limit":   5,
		"ratelimit.service.rate_limit.another.key3.total_hits":   15,
		"ratelimit.service.rate_limit.another.key3.within_limit": 10,
		"ratelimit.service.rate_limit.another.key3.near_limit":   2,
		"ratelimit.service.rate_limit.another.key3.over_limit":   5,
		"ratelimit_server.ShouldRateLimit.total_requests":        42,
	}
	basicPrometheus = []string{
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_rate_limit_foo_domain_not_found 1`,
		`ratelimit_service_rate_limit_near_limit{domain="another",key1="key2"} 4`,
		`ratelimit_service_rate_limit_near_limit{domain="another",key1="key3"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="another",key1="key2"} 5`,
		`ratelimit_service_rate_limit_over_limit{domain="another",key1="key3"} 5`,
		`ratelimit_service_rate_limit_total_hits{domain="another",key1="key2"} 40`,
		`ratelimit_service_rate_limit_total_hits{domain="another",key1="key3"} 15`,
		`ratelimit_service_rate_limit_total_hits{domain="basic",key1="key1"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="another",key1="key2"} 35`,
		`ratelimit_service_rate_limit_within_limit{domain="another",key1="key3"} 10`,
		`ratelimit_service_rate_limit_within_limit{domain="basic",key1="key1"} 1`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 42`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 42`,
	}
)

// statsReplay runs the basic scenario on a service of its own, started
// with env, until a run falls in one window of a minute, and returns the
// service. Its statistics are then those of one run.
func statsReplay(t *testing.T, env ...string) *rlsService {
	t.Helper()
	for try := 0; ; try++ {
		s := startRLS(t, append([]string{"REDIS_URL=" + testredis.Start(t), "STATS_FLUSH_INTERVAL=100ms"}, env...)...)
		start := time.Now().Unix()
		r := &rlsReplay{t: t, rls: s.client(t, nil)}
		basicReplay(t, r, false)
		if time.Now().Unix()/60 == start/60 {
			return s
		}
		if try == 3 {
			t.Fatal("four runs straddled the end of a minute")
		}
	}
}

// statsdCounters listens for statsd over TCP, or DogStatsD over UDP, and
// sums the counters it receives under envoyproxy/ratelimit's service's
// names, a DogStatsD counter's tags ("|#k:v") kept after its name.
type statsdCounters struct {
	addr  string
	mu    sync.Mutex
	count map[string]int
}

func listenStatsd(t *testing.T, udp bool) *statsdCounters {
	t.Helper()
	c := &statsdCounters{count: map[string]int{}}
	if udp {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		c.addr = pc.LocalAddr().String()
		go func() {
			buf := make([]byte, 1<<16)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				for l := range strings.SplitSeq(string(buf[:n]), "\n") {
					c.add(l)
				}
			}
		}()
		return c
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c.addr = ln.Addr().String()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					c.add(sc.Text())
				}
			}()
		}
	}()
	return c
}

// add counts a line, name:value|c, with DogStatsD's |#tags after it.
func (c *statsdCounters) add(line string) {
	name, rest, _ := strings.Cut(line, ":")
	f := strings.Split(rest, "|")
	if len(f) < 2 || f[1] != "c" || !strings.HasPrefix(name, "ratelimit.service.") && !strings.HasPrefix(name, "ratelimit_server.") {
		return // envoyproxy/ratelimit's runtime and Redis pool statistics, and timings
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return
	}
	for _, tags := range f[2:] {
		name += "|" + tags
	}
	c.mu.Lock()
	c.count[name] += n
	c.mu.Unlock()
}

// waitFor waits until the counters are want, for 30s at most.
func (c *statsdCounters) waitFor(t *testing.T, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		got := maps.Clone(c.count)
		c.mu.Unlock()
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statsd received, after 30s:\n%s\nwant\n%s", sortedCounts(got), sortedCounts(want))
		}
		time.Sleep(20 * time.Millisecond) // the service flushes on its own time
	}
}

func sortedCounts(m map[string]int) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("  %s %d", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestEnvoyScenariosStats replays the basic scenario with statsd, then
// with Prometheus, and compares the statistics with envoyproxy/ratelimit's.
func TestEnvoyScenariosStats(t *testing.T) {
	t.Run("statsd", func(t *testing.T) {
		t.Parallel()
		c := listenStatsd(t, false)
		host, port, _ := net.SplitHostPort(c.addr)
		statsReplay(t, "USE_STATSD=true", "STATSD_HOST="+host, "STATSD_PORT="+port)
		c.waitFor(t, basicStatsd)
	})

	// DogStatsD over UDP: the same counters, EXTRA_TAGS as tags.
	t.Run("DogStatsD", func(t *testing.T) {
		t.Parallel()
		c := listenStatsd(t, true)
		host, port, _ := net.SplitHostPort(c.addr)
		statsReplay(t, "USE_STATSD=false", "USE_DOG_STATSD=true", "STATSD_HOST="+host, "STATSD_PORT="+port, "EXTRA_TAGS=env:ci,team:edge")
		want := map[string]int{}
		for name, n := range basicStatsd {
			want[name+"|#env:ci,team:edge"] = n
		}
		c.waitFor(t, want)
	})

	t.Run("Prometheus", func(t *testing.T) {
		t.Parallel()
		promAddr := "127.0.0.1:" + freePort(t)
		statsReplay(t, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr)
		var got []string
		deadline := time.Now().Add(30 * time.Second)
		for !slices.Equal(got, basicPrometheus) {
			if time.Now().After(deadline) {
				t.Fatalf("PROMETHEUS_ADDR/metrics, after 30s:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(basicPrometheus, "\n"))
			}
			time.Sleep(20 * time.Millisecond) // the service flushes on its own time
			got = scrapeRatelimit(t, "http://"+promAddr+"/metrics")
		}
	})
}

// scrapeRatelimit returns the sorted lines of envoyproxy/ratelimit's
// service's series at url, without histograms' buckets and sums. Its
// ratelimit_go_* (the Go runtime's) and ratelimit_redis_pool_* series
// are left out: sluice has its own (see the migration guide).
func scrapeRatelimit(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "ratelimit_service_") && !strings.Contains(l, "_bucket{") && !strings.Contains(l, "_sum{") {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}
