package server

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/server/internal/statsd"
	"github.com/sluicehq/sluice/server/internal/statsdtest"
)

const statsdYAML = `domain: sd
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: /v1
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
`

// statsdLines is a statsd that listens on a free loopback port, TCP or
// UDP, and passes on each line it receives.
func statsdLines(t *testing.T, network string) (addr string, lines <-chan string) {
	t.Helper()
	return statsdtest.Lines(t, network)
}

// statsdSums adds up the counters that come in lines, by name with its
// tags as sent, and counts the timings, until they equal want; it fails
// after a deadline with what came.
func statsdSums(t *testing.T, lines <-chan string, want map[string]float64) {
	t.Helper()
	got := make(map[string]float64)
	deadline := time.After(30 * time.Second)
	for !maps.Equal(got, want) {
		select {
		case l := <-lines:
			name, rest, ok := strings.Cut(l, ":")
			value, kind, ok2 := strings.Cut(rest, "|")
			v, err := strconv.ParseFloat(value, 64)
			if !ok || !ok2 || err != nil {
				t.Fatalf("line %q: not statsd's name:value|type", l)
			}
			switch {
			case strings.HasPrefix(kind, "c"):
				got[name+"|"+kind] += v
			case strings.HasPrefix(kind, "ms"):
				got[name+"|"+kind]++ // how many timings
			default:
				t.Fatalf("line %q: unexpected type", l)
			}
		case <-deadline:
			t.Fatalf("statsd received\n%s\nwant\n%s", showSums(got), showSums(want))
		}
	}
}

func showSums(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "\t%s = %v\n", k, m[k])
	}
	return b.String()
}

// envoyStats are the statistics envoyproxy/ratelimit sends for the
// requests of TestStatsd on statsdYAML, keyed as statsdSums keys them
// (tag writes the type and the tags after a name): counters summed,
// timings counted.
func envoyStats(tag func(kind string) string) map[string]float64 {
	c := func(name string) string { return name + tag("c") }
	return map[string]float64{
		c("ratelimit.service.rate_limit.sd.user.total_hits"):                 6,
		c("ratelimit.service.rate_limit.sd.user.within_limit"):               5,
		c("ratelimit.service.rate_limit.sd.user.near_limit"):                 1,
		c("ratelimit.service.rate_limit.sd.user.over_limit"):                 1,
		c("ratelimit.service.rate_limit.sd.trial.total_hits"):                2,
		c("ratelimit.service.rate_limit.sd.trial.within_limit"):              1,
		c("ratelimit.service.rate_limit.sd.trial.near_limit"):                1,
		c("ratelimit.service.rate_limit.sd.trial.over_limit"):                1,
		c("ratelimit.service.rate_limit.sd.trial.shadow_mode"):               1,
		c("ratelimit.service.rate_limit.sd.route_/v1.user_bob.total_hits"):   1,
		c("ratelimit.service.rate_limit.sd.route_/v1.user_bob.within_limit"): 1,
		c("ratelimit.service.rate_limit.nope.domain_not_found"):              1,
		c("ratelimit.service.config_load_success"):                           1,
		c("ratelimit_server.ShouldRateLimit.total_requests"):                 7,
		"ratelimit_server.ShouldRateLimit.response_time" + tag("ms"):         7,
	}
}

// TestStatsd sends requests over gRPC and reads the statistics a statsd
// receives, plain over TCP and DogStatsD over UDP, each with a tag.
func TestStatsd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		network string
		dog     bool
		tag     func(kind string) string // the line's tags and type, as statsdSums keys them
	}{
		{"statsd", "tcp", false, func(kind string) string { return ".__env=test|" + kind }},
		{"DogStatsD", "udp", true, func(kind string) string { return "|" + kind + "|#env:test" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, lines := statsdLines(t, tc.network)
			e := start(t, Settings{
				Paths:  []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
				Statsd: &Statsd{Addr: addr, Dog: tc.dog, Tags: []StatsdTag{{"env", "test"}}, FlushInterval: 10 * time.Millisecond},
			})
			statsdRequests(t, e)
			statsdSums(t, lines, envoyStats(tc.tag))
		})
	}
}

// A statsd that cannot be reached holds up no decision.
func TestStatsdUnreachable(t *testing.T) {
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	e := start(t, Settings{Statsd: &Statsd{Addr: addr, FlushInterval: 10 * time.Millisecond}})
	for range 3 {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=a")); err != nil {
			t.Fatalf("ShouldRateLimit = %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.srv.st.sink.(*statsd.Sink).Dropped() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing was dropped 30s after the requests")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStatsdSettingsRefused(t *testing.T) {
	for _, sd := range []Statsd{
		{Addr: "localhost"},
		{Addr: "localhost:8125", NearLimitRatio: 1.5},
		{Addr: "localhost:8125", FlushInterval: -time.Second},
		{Addr: "localhost:8125", Dog: true, Mogrifiers: []StatsdMogrifier{{Pattern: "(", Name: "x"}}},
		{Addr: "localhost:8125", Dog: true, Mogrifiers: []StatsdMogrifier{{Name: "x"}}},
		{Addr: "localhost:8125", Dog: true, Mogrifiers: []StatsdMogrifier{{Pattern: "x"}}},
		{Addr: "localhost:8125", Mogrifiers: []StatsdMogrifier{{Pattern: "x", Name: "y"}}}, // plain statsd
	} {
		if _, err := New(Settings{Store: newStore(t), Statsd: &sd}); err == nil {
			t.Errorf("New with Statsd %+v = nil error, want one", sd)
		}
	}
}

// TestStatsdMogrifiers: DogStatsD's names as envoyproxy/ratelimit's
// mogrifiers rename them, with their tags after EXTRA_TAGS; a name no
// mogrifier matches is sent as it is.
func TestStatsdMogrifiers(t *testing.T) {
	addr, lines := statsdLines(t, "udp")
	e := start(t, Settings{
		Paths: []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
		Statsd: &Statsd{Addr: addr, Dog: true, Tags: []StatsdTag{{"env", "test"}}, FlushInterval: 10 * time.Millisecond,
			Mogrifiers: []StatsdMogrifier{
				{Pattern: `^ratelimit_server\.(.*)\.response_time$`, Name: "rpc.latency", Tags: []StatsdTag{{"method", "$1"}}},
				{Pattern: `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`, Name: "ratelimit.service.rate_limit.$3",
					Tags: []StatsdTag{{"domain", "$1"}, {"descriptor", "$2"}}},
			}},
	})
	for _, hits := range []uint32{5, 1} {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", hits, "user=a")); err != nil {
			t.Fatalf("ShouldRateLimit = %v", err)
		}
	}
	tags := "|#env:test,domain:sd,descriptor:user"
	statsdSums(t, lines, map[string]float64{
		"ratelimit.service.rate_limit.total_hits|c" + tags:            6,
		"ratelimit.service.rate_limit.within_limit|c" + tags:          5,
		"ratelimit.service.rate_limit.near_limit|c" + tags:            1,
		"ratelimit.service.rate_limit.over_limit|c" + tags:            1,
		"ratelimit.service.config_load_success|c|#env:test":           1,
		"ratelimit_server.ShouldRateLimit.total_requests|c|#env:test": 2,
		"rpc.latency|ms|#env:test,method:ShouldRateLimit":             2,
	})
}

// Under Settings.Shadow a request that a limit would deny counts in
// global_shadow_mode, and its hits as envoyproxy/ratelimit splits them:
// 6 hits on a limit of 5 with near_limit past 4 are 1 near and 1 over.
func TestStatsdGlobalShadow(t *testing.T) {
	addr, lines := statsdLines(t, "tcp")
	e := start(t, Settings{
		Paths:  []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
		Shadow: true,
		Statsd: &Statsd{Addr: addr, FlushInterval: 10 * time.Millisecond},
	})
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", 6, "user=a"))
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v; want OK in shadow mode", resp, err)
	}
	statsdSums(t, lines, map[string]float64{
		"ratelimit.service.rate_limit.sd.user.total_hits|c": 6,
		"ratelimit.service.rate_limit.sd.user.near_limit|c": 1,
		"ratelimit.service.rate_limit.sd.user.over_limit|c": 1,
		"ratelimit.service.global_shadow_mode|c":            1,
		"ratelimit.service.config_load_success|c":           1,
		"ratelimit_server.ShouldRateLimit.total_requests|c": 1,
		"ratelimit_server.ShouldRateLimit.response_time|ms": 1,
	})
}

// TestStatsdLocalCache: on the Redis store, a denial answered from its
// deny cache counts in over_limit_with_local_cache, and in over_limit and
// total_hits beside it, as envoyproxy/ratelimit counts its local cache's.
// Of a limit of 5: 5 hits are within (1 near), the 6th is Redis's denial,
// the 7th the cache's.
func TestStatsdLocalCache(t *testing.T) {
	addr, lines := statsdLines(t, "tcp")
	st := newRedisStore(t)
	e := start(t, Settings{
		Store:  st,
		Paths:  []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
		Statsd: &Statsd{Addr: addr, FlushInterval: 10 * time.Millisecond},
	})
	for i, hits := range []uint32{5, 1, 1} {
		resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", hits, "user=c"))
		if want := i == 0; err != nil || (resp.GetOverallCode() == rlspb.RateLimitResponse_OK) != want {
			t.Fatalf("request %d of %d hits = %v, %v; want OK %v", i, hits, resp, err, want)
		}
	}
	if n := st.Stats().CacheHits; n != 1 {
		t.Fatalf("the Redis store's CacheHits = %d, want 1: the third request's denial is the cache's", n)
	}
	statsdSums(t, lines, map[string]float64{
		"ratelimit.service.rate_limit.sd.user.total_hits|c":                  7,
		"ratelimit.service.rate_limit.sd.user.within_limit|c":                5,
		"ratelimit.service.rate_limit.sd.user.near_limit|c":                  1,
		"ratelimit.service.rate_limit.sd.user.over_limit|c":                  2,
		"ratelimit.service.rate_limit.sd.user.over_limit_with_local_cache|c": 1,
		"ratelimit.service.config_load_success|c":                            1,
		"ratelimit_server.ShouldRateLimit.total_requests|c":                  3,
		"ratelimit_server.ShouldRateLimit.response_time|ms":                  3,
	})
}

// promYAML adds to statsdYAML a three-level descriptor with two third
// levels, which the default mapper sums under their first two.
const promYAML = statsdYAML + `  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c1
            rate_limit: {unit: minute, requests_per_unit: 10}
          - key: c2
            rate_limit: {unit: minute, requests_per_unit: 10}
`

// envoyPromSeries are the series envoyproxy/ratelimit's default mapper
// yields for TestEnvoyPrometheus's requests, as exposition lines; the
// response time is checked by its count. A path of two levels or more
// shows under its first two, the deeper levels summed away.
var envoyPromSeries = []string{
	`ratelimit_service_config_load_success 1`,
	`ratelimit_service_rate_limit_near_limit{domain="sd",key1="trial"} 1`,
	`ratelimit_service_rate_limit_near_limit{domain="sd",key1="user"} 1`,
	`ratelimit_service_rate_limit_over_limit{domain="sd",key1="trial"} 1`,
	`ratelimit_service_rate_limit_over_limit{domain="sd",key1="user"} 1`,
	`ratelimit_service_rate_limit_nope_domain_not_found 1`,
	`ratelimit_service_rate_limit_shadow_mode{domain="sd",key1="trial"} 1`,
	`ratelimit_service_rate_limit_total_hits{domain="sd",key1="trial"} 2`,
	`ratelimit_service_rate_limit_total_hits{domain="sd",key1="user"} 6`,
	`ratelimit_service_rate_limit_total_hits{domain="sd",key1="a",key2="b"} 5`,
	`ratelimit_service_rate_limit_total_hits{domain="sd",key1="route_/v1",key2="user_bob"} 1`,
	`ratelimit_service_rate_limit_within_limit{domain="sd",key1="trial"} 1`,
	`ratelimit_service_rate_limit_within_limit{domain="sd",key1="user"} 5`,
	`ratelimit_service_rate_limit_within_limit{domain="sd",key1="a",key2="b"} 5`,
	`ratelimit_service_rate_limit_within_limit{domain="sd",key1="route_/v1",key2="user_bob"} 1`,
	`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 9`,
	`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 9`,
}

// TestEnvoyPrometheus sends the requests of TestStatsd, and two on a
// three-level descriptor, and reads envoyproxy/ratelimit's series from
// /metrics, beside sluice's own.
func TestEnvoyPrometheus(t *testing.T) {
	e := start(t, Settings{
		Paths:           []string{writeFile(t, t.TempDir(), "sd.yaml", promYAML)},
		EnvoyPrometheus: &EnvoyPrometheus{},
	})
	statsdRequests(t, e)
	for _, r := range []struct {
		desc string
		hits uint32
	}{{"a=1,b=2,c1=3", 2}, {"a=1,b=2,c2=3", 3}} {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", r.hits, r.desc)); err != nil {
			t.Fatalf("ShouldRateLimit(sd, %s) = %v", r.desc, err)
		}
	}
	code, _, text := get(t, e.base+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d\n%s", code, text)
	}
	var got []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, "ratelimit_") && !strings.Contains(l, "_bucket{") && !strings.Contains(l, "_sum{") {
			got = append(got, l)
		}
	}
	want := slices.Clone(envoyPromSeries)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("/metrics's envoyproxy/ratelimit series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(text, "\nsluice_decisions_total{") {
		t.Error("/metrics lacks sluice_decisions_total")
	}
}

// envoyMapperYAML is a statsd_exporter mapping of a user's
// (PROMETHEUS_MAPPER_YAML): every limit statistic as one family labelled
// by its statistic, the service's own (config loads) dropped, and the
// response time as a histogram of buckets of its own.
const envoyMapperYAML = `
mappings:
  - match: "ratelimit.service.rate_limit.*.*.*"
    name: "rl_hits"
    labels:
      domain: "$1"
      descriptor: "$2"
      stat: "$3"
  - match: "ratelimit.service.*"
    name: "dropped"
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "rl_rpc_seconds"
    observer_type: histogram
    histogram_options:
      buckets: [0.5, 1, 5]
    labels:
      method: "$1"
`

// TestEnvoyPrometheusMapper: with EnvoyPrometheus.Mapper, /metrics shows
// the series the user's statsd_exporter mapping names, none of the
// default mapping's; a mapping statsd_exporter refuses makes New fail.
func TestEnvoyPrometheusMapper(t *testing.T) {
	e := start(t, Settings{
		Paths:           []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
		EnvoyPrometheus: &EnvoyPrometheus{Mapper: envoyMapperYAML},
	})
	for _, hits := range []uint32{5, 1} {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", hits, "user=a")); err != nil {
			t.Fatalf("ShouldRateLimit = %v", err)
		}
	}
	code, _, text := get(t, e.base+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d\n%s", code, text)
	}
	var got []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, "rl_") || strings.HasPrefix(l, "ratelimit") {
			got = append(got, l)
		}
	}
	want := []string{
		`rl_hits{descriptor="user",domain="sd",stat="near_limit"} 1`,
		`rl_hits{descriptor="user",domain="sd",stat="over_limit"} 1`,
		`rl_hits{descriptor="user",domain="sd",stat="total_hits"} 6`,
		`rl_hits{descriptor="user",domain="sd",stat="within_limit"} 5`,
		`rl_rpc_seconds_bucket{method="ShouldRateLimit",le="+Inf"} 2`,
		`rl_rpc_seconds_bucket{method="ShouldRateLimit",le="0.5"}`,
		`rl_rpc_seconds_bucket{method="ShouldRateLimit",le="1"}`,
		`rl_rpc_seconds_bucket{method="ShouldRateLimit",le="5"}`,
		`rl_rpc_seconds_count{method="ShouldRateLimit"} 2`,
		`ratelimit_server_ShouldRateLimit_total_requests 2`,
	}
	// The buckets below +Inf and the sum hold measured times: only their
	// names are compared.
	got = slices.DeleteFunc(got, func(l string) bool { return strings.HasPrefix(l, "rl_rpc_seconds_sum") })
	for i, l := range got {
		if strings.HasPrefix(l, "rl_rpc_seconds_bucket") && !strings.Contains(l, "+Inf") {
			got[i], _, _ = strings.Cut(l, " ")
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("/metrics's mapped series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, bad := range []string{"mappings: [", "mappings:\n  - match: a.b\n    name: \"bad-name\"\n"} {
		_, err := New(Settings{Store: newStore(t), EnvoyPrometheus: &EnvoyPrometheus{Mapper: bad}})
		if err == nil || !strings.Contains(err.Error(), "EnvoyPrometheus.Mapper") {
			t.Errorf("New with EnvoyPrometheus.Mapper %q = %v, want an error naming it", bad, err)
		}
	}
}

// namesSink is a statSink that counts the distinct names made in it.
type namesSink struct {
	*statsd.Prom
	names map[string]bool
}

func (s *namesSink) Counter(name string) *statsd.Counter {
	s.names[name] = true
	return s.Prom.Counter(name)
}

// A flood of new request values (detailed_metric paths, unknown domains)
// makes at most maxStatNames of them into statistics, the rest counted
// nowhere, while a path the config names is still made past the bound.
func TestStatsdNamesBounded(t *testing.T) {
	sink := &namesSink{Prom: statsd.NewProm(false), names: map[string]bool{}}
	st := newStatsOn(sink, 0.8, false, nil)
	base := len(sink.names)
	made := 0
	for i := range 2 * maxStatNames {
		if st.notFound(fmt.Sprintf("flood%d", i)) != nil {
			made++
		}
		if st.path(fmt.Sprintf("sd.user_%d", i), true) != nil {
			made++
		}
	}
	if made != maxStatNames {
		t.Errorf("%d names made of request values, want %d", made, maxStatNames)
	}
	// A path has its six counters; a domain_not_found one.
	if n := len(sink.names) - base; n > 6*maxStatNames {
		t.Errorf("%d statistics made, want at most %d", n, 6*maxStatNames)
	}
	if st.notFound("flood0") == nil || st.path("sd.user_0", true) == nil {
		t.Error("a name made before the bound is gone")
	}
	if st.path("sd.user", false) == nil {
		t.Error("the config's path is not made past the bound")
	}
}

// Statistics named by a request's values keep a bounded size however long
// the values (a limit override's, an unknown domain), and two values that
// share their first bytes still count apart.
func TestStatsdNamesShort(t *testing.T) {
	sink := &namesSink{Prom: statsd.NewProm(false), names: map[string]bool{}}
	st := newStatsOn(sink, 0.8, false, nil)
	long := strings.Repeat("v", 60_000)
	a, b := st.path("sd.user_"+long+"a", true), st.path("sd.user_"+long+"b", true)
	if a == nil || b == nil || a == b {
		t.Fatalf("two long paths: %p and %p, want two sets of counters", a, b)
	}
	if st.path("sd.user_"+long+"a", true) != a {
		t.Error("a long path asked again has new counters")
	}
	if st.notFound(long+"é") == nil {
		t.Fatal("a long unknown domain is not counted")
	}
	for name := range sink.names {
		if len(name) > len(statRateLimit)+maxStatPath+len(statLocalCache) {
			t.Errorf("a statistic named in %d bytes: %.80q...", len(name), name)
		}
		if !utf8.ValidString(name) {
			t.Errorf("a statistic named in invalid UTF-8: %.80q", name)
		}
	}
	if short := "sd.user_" + strings.Repeat("v", 200); st.path(short, true) == nil || !sink.names[statRateLimit+short+statTotalHits] {
		t.Error("a path within the bound is not named as it is")
	}
}

// statsdRequests sends TestStatsd's requests to e: on user=a past its
// limit, on a limit in shadow mode, on a detailed_metric one, and on a
// domain the config lacks.
func statsdRequests(t *testing.T, e *env) {
	t.Helper()
	for _, r := range []struct {
		domain, desc string
		hits         uint32
	}{
		{"sd", "user=a", 3},
		{"sd", "user=a", 2},
		{"sd", "user=a", 1},
		{"sd", "trial=x", 1},
		{"sd", "trial=x", 1},
		{"sd", "route=/v1,user=bob", 1},
		{"nope", "user=a", 1},
	} {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq(r.domain, r.hits, r.desc)); err != nil {
			t.Fatalf("ShouldRateLimit(%s, %s) = %v", r.domain, r.desc, err)
		}
	}
}
