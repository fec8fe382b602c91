package main

import (
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

// The Go runtime's and the Redis pool's statistics, as envoyproxy/ratelimit
// sends them, by kind: those every flush carries, and those a flush
// carries when they counted (a counter sends nothing for no change: no
// garbage collection, so nothing freed, no connection closed).
var (
	runtimeStats = map[string]string{
		"ratelimit.go.alloc": "g", "ratelimit.go.gcCPUPercent": "g", "ratelimit.go.heapAlloc": "g",
		"ratelimit.go.heapIdle": "g", "ratelimit.go.heapInuse": "g", "ratelimit.go.heapObjects": "g",
		"ratelimit.go.heapReleased": "g", "ratelimit.go.heapSys": "g", "ratelimit.go.lastGC": "g",
		"ratelimit.go.nextGC": "g", "ratelimit.go.numGoroutine": "g", "ratelimit.go.sys": "g",
		"ratelimit.go.mallocs": "c", "ratelimit.go.totalAlloc": "c",
		"ratelimit.redis_pool.cx_active": "g", "ratelimit.redis_pool.cx_total": "c",
	}
	runtimeStatsSometimes = map[string]string{
		"ratelimit.go.frees": "c", "ratelimit.go.numGC": "c", "ratelimit.go.pauseTotalNs": "c", "ratelimit.redis_pool.cx_local_close": "c",
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
	// kinds are the runtime and pool statistics' kinds, by name without
	// tags; bad what of them or of the timings does not read as
	// envoyproxy/ratelimit sends it; timings the response times.
	kinds   map[string]string
	bad     []string
	timings int
}

func listenStatsd(t *testing.T, udp bool) *statsdCounters {
	t.Helper()
	c := &statsdCounters{count: map[string]int{}, kinds: map[string]string{}}
	c.addr = statsdListen(t, udp, c.add)
	return c
}

// add counts a line, name:value|c, with DogStatsD's |#tags after it.
func (c *statsdCounters) add(line string) {
	name, rest, _ := strings.Cut(line, ":")
	f := strings.Split(rest, "|")
	if len(f) < 2 {
		return
	}
	if strings.HasPrefix(name, "ratelimit.go.") || strings.HasPrefix(name, "ratelimit.redis_pool.") {
		// A gauge's value is anything; a counter's, the count since the
		// last flush, is never negative.
		v, err := strconv.ParseFloat(f[0], 64)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.kinds[name] = f[1]
		if err != nil || v < 0 {
			c.bad = append(c.bad, line)
		}
		return
	}
	if f[1] == "ms" && strings.HasPrefix(name, "ratelimit_server.ShouldRateLimit.response_time") {
		// Whole milliseconds, rounded down, as envoyproxy/ratelimit
		// times them.
		v, err := strconv.ParseFloat(f[0], 64)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.timings++
		if err != nil || v < 0 || v != float64(int64(v)) {
			c.bad = append(c.bad, line)
		}
		return
	}
	if f[1] != "c" || !strings.HasPrefix(name, "ratelimit.service.") && !strings.HasPrefix(name, "ratelimit_server.") {
		return
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

// waitForRuntime waits until every runtime and pool statistic that every
// flush carries came, and all the response times, for 30s at most, and
// checks their kinds and values.
func (c *statsdCounters) waitForRuntime(t *testing.T, timings int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		kinds, bad, n := maps.Clone(c.kinds), slices.Clone(c.bad), c.timings
		c.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("statsd received, not as envoyproxy/ratelimit sends them:\n%s", strings.Join(bad, "\n"))
		}
		for name, kind := range kinds {
			if w := runtimeStats[name] + runtimeStatsSometimes[name]; w != kind {
				t.Errorf("%s: kind %q, want %q", name, kind, w)
			}
		}
		missing := 0
		for name := range runtimeStats {
			if _, ok := kinds[name]; !ok {
				missing++
			}
		}
		if missing == 0 && n == timings {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statsd received, after 30s, %d of %d response times and the runtime statistics %v, want %v", n, timings, kinds, runtimeStats)
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
		c.waitForRuntime(t, basicStatsd["ratelimit_server.ShouldRateLimit.total_requests"])
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
		c.waitForRuntime(t, basicStatsd["ratelimit_server.ShouldRateLimit.total_requests"])
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
		// The runtime and pool statistics, by kind, their counters never
		// going down from one scrape to the next; response_time's sum in
		// whole milliseconds.
		first := scrapeRuntime(t, "http://"+promAddr+"/metrics")
		second := scrapeRuntime(t, "http://"+promAddr+"/metrics")
		for name, kind := range runtimeStats {
			p := strings.ReplaceAll(name, ".", "_")
			if first.kinds[p] != map[string]string{"g": "gauge", "c": "counter"}[kind] {
				t.Errorf("%s: type %q, want that of %q", p, first.kinds[p], kind)
			}
			if kind == "c" && second.values[p] < first.values[p] {
				t.Errorf("%s went down from %v to %v", p, first.values[p], second.values[p])
			}
		}
		if sum := second.values[`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"}`]; sum != float64(int64(sum)) {
			t.Errorf("response_time's sum %v: want whole milliseconds", sum)
		}
	})
}

// scrapeRatelimit returns the sorted lines of envoyproxy/ratelimit's
// service's series at url, without histograms' buckets and sums. Its
// ratelimit_go_* (the Go runtime's) and ratelimit_redis_pool_* series,
// whose values vary, are scrapeRuntime's.
func scrapeRatelimit(t *testing.T, url string) []string {
	t.Helper()
	b := scrapeBody(t, url)
	var got []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "ratelimit_service_") && !strings.Contains(l, "_bucket{") && !strings.Contains(l, "_sum{") {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

// promRuntime are the types and values of a scrape's series.
type promRuntime struct {
	kinds  map[string]string  // family -> its type
	values map[string]float64 // series -> its value
}

// scrapeRuntime scrapes url for the runtime and pool series' types and
// values, and response_time's.
func scrapeRuntime(t *testing.T, url string) promRuntime {
	t.Helper()
	b := scrapeBody(t, url)
	p := promRuntime{kinds: map[string]string{}, values: map[string]float64{}}
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			p.kinds[f[2]] = f[3]
			continue
		}
		if !strings.HasPrefix(l, "ratelimit_go_") && !strings.HasPrefix(l, "ratelimit_redis_pool_") && !strings.HasPrefix(l, "ratelimit_service_response_time_seconds_sum") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			p.values[l[:i]] = v
		}
	}
	return p
}

// scrapeBody returns the body of a GET of url.
func scrapeBody(t *testing.T, url string) []byte {
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
	return b
}
