package statsd

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestPromName states which series envoyproxy/ratelimit's default mapper
// (statsd_exporter's semantics: a glob's "*" takes one part; the regular
// expressions, unanchored, come after the globs) yields for each depth of
// statistics path.
func TestPromName(t *testing.T) {
	for _, tc := range []struct {
		in     string
		name   string
		labels prometheus.Labels
	}{
		// One level: the domain and one key, the globs'.
		{"ratelimit.service.rate_limit.d.k1.total_hits", "ratelimit_service_rate_limit_total_hits", prometheus.Labels{"domain": "d", "key1": "k1"}},
		{"ratelimit.service.rate_limit.d.k1_v.shadow_mode", "ratelimit_service_rate_limit_shadow_mode", prometheus.Labels{"domain": "d", "key1": "k1_v"}},
		// Two levels: the regular expression, both keys.
		{"ratelimit.service.rate_limit.d.k1.k2.total_hits", "ratelimit_service_rate_limit_total_hits", prometheus.Labels{"domain": "d", "key1": "k1", "key2": "k2"}},
		{"ratelimit.service.rate_limit.d.route_/v1.user_bob.within_limit", "ratelimit_service_rate_limit_within_limit", prometheus.Labels{"domain": "d", "key1": "route_/v1", "key2": "user_bob"}},
		// Three levels and four: the first two keys, the deeper dropped.
		{"ratelimit.service.rate_limit.d.k1.k2.k3.near_limit", "ratelimit_service_rate_limit_near_limit", prometheus.Labels{"domain": "d", "key1": "k1", "key2": "k2"}},
		{"ratelimit.service.rate_limit.d.k1.k2.k3.k4.over_limit", "ratelimit_service_rate_limit_over_limit", prometheus.Labels{"domain": "d", "key1": "k1", "key2": "k2"}},
		{"ratelimit.service.rate_limit.d.domain_not_found", "ratelimit_service_rate_limit_d_domain_not_found", nil},
		{"ratelimit.service.call.should_rate_limit.redis_error", "ratelimit_service_should_rate_limit_error", prometheus.Labels{"err_type": "redis_error"}},
		{"ratelimit_server.ShouldRateLimit.total_requests", "ratelimit_service_total_requests", prometheus.Labels{"grpc_method": "ShouldRateLimit"}},
		{"ratelimit_server.ShouldRateLimit.response_time", "ratelimit_service_response_time_seconds", prometheus.Labels{"grpc_method": "ShouldRateLimit"}},
		{"ratelimit.service.config_load_success", "ratelimit_service_config_load_success", nil},
		{"ratelimit.service.config_load_error", "ratelimit_service_config_load_error", nil},
		{"ratelimit.service.global_shadow_mode", "ratelimit_service_global_shadow_mode", nil},
		{"9lives", "_9lives", nil},
	} {
		name, labels := promName(tc.in)
		if name != tc.name || !maps.Equal(labels, tc.labels) {
			t.Errorf("promName(%q) = %s%v, want %s%v", tc.in, name, labels, tc.name, tc.labels)
		}
	}
}

// TestPromTiming: response_time is observed in seconds, or in
// milliseconds as PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS asks; and
// counters whose names map to one series add up.
func TestPromTiming(t *testing.T) {
	for _, tc := range []struct {
		millis bool
		want   float64
	}{{false, 1.5}, {true, 1500}} {
		p := NewProm(tc.millis)
		p.Timing("ratelimit_server.ShouldRateLimit.response_time", 1500*time.Millisecond)
		p.Counter("ratelimit.service.rate_limit.d.a.b.c1.total_hits").Add(2)
		p.Counter("ratelimit.service.rate_limit.d.a.b.c2.total_hits").Add(3)
		reg := prometheus.NewRegistry()
		reg.MustRegister(p)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					got[mf.GetName()] = h.GetSampleSum()
				} else {
					got[mf.GetName()] = m.GetCounter().GetValue()
				}
			}
		}
		want := map[string]float64{"ratelimit_service_response_time_seconds": tc.want, "ratelimit_service_rate_limit_total_hits": 5}
		if !maps.Equal(got, want) {
			t.Errorf("millis %v: %v, want %v", tc.millis, got, want)
		}
	}
}

// userMapping is a statsd_exporter mapping of the kind
// PROMETHEUS_MAPPER_YAML holds: a glob with labels, a drop, and a regular
// expression with a help text, a scale and a histogram of its own buckets.
const userMapping = `
mappings:
  - match: "ratelimit.service.rate_limit.*.*.*"
    name: "rl_$3"
    labels:
      domain: "$1"
      descriptor: "$2"
  - match: "ratelimit.service.config_load_success"
    name: "dropped"
    action: drop
  - match: 'ratelimit_server\.(.*)\.response_time'
    match_type: regex
    name: "rpc_latency_ms"
    help: "The gRPC calls' latency."
    scale: 1000
    observer_type: histogram
    histogram_options:
      buckets: [1, 10, 100]
    labels:
      method: "$1"
`

// TestPromMapped: under a user's mapping, statsd_exporter's mapper names
// the series: the glob's name and labels, a dropped name not shown, a
// name no rule takes escaped, the regular expression's histogram scaled
// with its buckets and help, and a timing no rule takes as a summary,
// statsd_exporter's default.
func TestPromMapped(t *testing.T) {
	p, err := NewPromMapped(false, userMapping)
	if err != nil {
		t.Fatal(err)
	}
	p.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(2)
	p.Counter("ratelimit.service.rate_limit.d.k.v.total_hits").Add(1)
	p.Counter("ratelimit.service.config_load_success").Add(1)
	p.Counter("ratelimit.service.config_load_error").Add(1)
	p.Timing("ratelimit_server.ShouldRateLimit.response_time", 1500*time.Microsecond)
	p.Timing("other.timing", time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				got[mf.GetName()] = fmt.Sprintf("histogram %s%q sum %v buckets %v", labels, mf.GetHelp(), h.GetSampleSum(), bounds)
			case m.GetSummary() != nil:
				got[mf.GetName()] = fmt.Sprintf("summary %ssum %v", labels, m.GetSummary().GetSampleSum())
			default:
				got[mf.GetName()] = fmt.Sprintf("counter %s%v", labels, m.GetCounter().GetValue())
			}
		}
	}
	want := map[string]string{
		"rl_total_hits": "counter descriptor=k domain=d 2",
		"ratelimit_service_rate_limit_d_k_v_total_hits": "counter 1",
		"ratelimit_service_config_load_error":           "counter 1",
		"rpc_latency_ms":                                `histogram method=ShouldRateLimit "The gRPC calls' latency." sum 1.5 buckets [1 10 100]`,
		"other_timing":                                  "summary sum 1",
	}
	if !maps.Equal(got, want) {
		t.Errorf("series:\n%v\nwant\n%v", got, want)
	}
}

// TestPromMappedRefused: a mapping statsd_exporter's mapper refuses, or
// whose histogram or summary could not be made, is refused with the
// reason.
func TestPromMappedRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"mappings: [", "yaml"},
		{"mappings:\n  - match: a.b\n    name: \"bad-name\"\n", "bad-name"},
		{"mappings:\n  - match: 'a(['\n    match_type: regex\n    name: x\n", "regex"},
		{"mappings:\n  - match: a.b\n    name: x\n    observer_type: histogram\n    histogram_options:\n      buckets: [10, 1]\n", "increasing"},
		{"mappings:\n  - match: a.b\n    name: x\n    labels:\n      le: \"1\"\n", `"le"`},
		{"defaults:\n  summary_options:\n    max_age: -1s\n", "max_age"},
	} {
		if _, err := NewPromMapped(false, tc.yaml); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPromMapped(%q) = %v, want an error naming %s", tc.yaml, err, tc.want)
		}
	}
}

// A gauge shows as a gauge, zero included, as Generate's function set it
// at the scrape.
func TestPromGauges(t *testing.T) {
	p := NewProm(true)
	g := p.Gauge("ratelimit.go.alloc")
	p.Gauge("ratelimit.go.sys") // never set: shown as 0
	n := 0.0
	p.Generate(func() {
		n++
		g.Set(uint64(1000 * n))
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	for _, want := range []float64{1000, 2000} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetType() != dto.MetricType_GAUGE {
				t.Errorf("%s: type %v, want a gauge", mf.GetName(), mf.GetType())
			}
			got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
		if w := map[string]float64{"ratelimit_go_alloc": want, "ratelimit_go_sys": 0}; !maps.Equal(got, w) {
			t.Errorf("%v, want %v", got, w)
		}
	}
}
