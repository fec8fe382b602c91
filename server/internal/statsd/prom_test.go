package statsd

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
