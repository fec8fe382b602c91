package server

import (
	"fmt"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Tests of envoyproxy/ratelimit's config features as the server answers
// them: value_to_metric, quota_mode, descriptor metadata and domains
// merged across files.

// series lists the series of a metric with the given labels.
func series(t *testing.T, s *Server, name string, labels ...string) []*dto.Metric {
	t.Helper()
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

const valueToMetricYAML = `domain: labels
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {name: per_route_user, unit: minute, requests_per_unit: 1}
  - key: ip
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1}
`

// value_to_metric puts the route into a label of its own metric, and only
// there; a flood of routes stays at MaxLabelValues series and "(other)".
func TestValueToMetric(t *testing.T) {
	path := writeFile(t, t.TempDir(), "labels.yaml", valueToMetricYAML)
	s, _ := newServer(t, Config{Paths: []string{path}, ReloadInterval: -1})
	ctx := t.Context()
	for range 2 { // within, then over
		if _, err := s.ShouldRateLimit(ctx, rlReq("labels", 0, "route=/orders,user=alice", "ip=10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		result string
		want   float64
	}{{resultWithin, 1}, {resultOver, 1}} {
		if got := counter(t, s, "sluice_value_decisions_total", "rule", "per_route_user", "descriptor", "route=/orders|user", "result", tt.result); got != tt.want {
			t.Errorf("sluice_value_decisions_total{descriptor=route=/orders|user,result=%s} = %v, want %v", tt.result, got, tt.want)
		}
	}
	// The address is in no label: its descriptor does not ask.
	if got := series(t, s, "sluice_value_decisions_total", "rule", "per_ip"); len(got) != 0 {
		t.Errorf("per_ip has %d value series, want none", len(got))
	}
	// The rule's own count is as without value_to_metric.
	if got := counter(t, s, "sluice_decisions_total", "rule", "per_route_user", "result", resultOver); got != 1 {
		t.Errorf("sluice_decisions_total{rule=per_route_user,result=over} = %v, want 1", got)
	}

	const flood = 3 * MaxLabelValues
	for i := range flood {
		if _, err := s.ShouldRateLimit(ctx, rlReq("labels", 0, fmt.Sprintf("route=/r%d,user=bob", i))); err != nil {
			t.Fatal(err)
		}
	}
	ms := series(t, s, "sluice_value_decisions_total", "rule", "per_route_user", "result", resultWithin)
	descs := map[string]float64{}
	var total float64
	for _, m := range ms {
		descs[labelOf(m, "descriptor")] = m.GetCounter().GetValue()
		total += m.GetCounter().GetValue()
	}
	if len(descs) != MaxLabelValues+1 || descs[labelOther] == 0 {
		t.Errorf("after %d routes: %d descriptors counted apart (with (other): %v), want %d and (other)",
			flood, len(descs), descs[labelOther] != 0, MaxLabelValues)
	}
	if want := float64(1 + flood); total != want {
		t.Errorf("within decisions over every descriptor series = %v, want %v", total, want)
	}
	// Two results and the first route, before the flood, kept its series.
	if got := len(series(t, s, "sluice_value_decisions_total", "rule", "per_route_user")); got > 3*(MaxLabelValues+1) {
		t.Errorf("per_route_user has %d series, want at most %d", got, 3*(MaxLabelValues+1))
	}

	// A reload that changes the rule drops its series; one that keeps it,
	// keeps them.
	writeFile(t, filepath.Dir(path), "labels.yaml", valueToMetricYAML+"  - key: extra\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(series(t, s, "sluice_value_decisions_total", "rule", "per_route_user")); got == 0 {
		t.Error("a reload that kept per_route_user dropped its series")
	}
	writeFile(t, filepath.Dir(path), "labels.yaml", `domain: labels
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {name: per_route_user, unit: minute, requests_per_unit: 2}
`)
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(series(t, s, "sluice_value_decisions_total", "rule", "per_route_user")); got != 0 {
		t.Errorf("after a reload that changed per_route_user: %d series, want none", got)
	}
	if _, err := s.ShouldRateLimit(ctx, rlReq("labels", 0, "route=/orders,user=alice")); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, s, "sluice_value_decisions_total", "rule", "per_route_user", "descriptor", "route=/orders|user", "result", resultWithin); got != 1 {
		t.Errorf("the changed rule counts afresh: %v, want 1", got)
	}
}
