package server

import (
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/keys"
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
	s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1})
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

const quotaYAML = `domain: models
descriptors:
  - key: model
    value: small
    quota_mode: true
    rate_limit: {name: small, unit: minute, requests_per_unit: 1}
  - key: model
    value: large
    quota_mode: true
    rate_limit: {name: large, unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
`

// answer is a response in short: the overall code, then each
// descriptor's code and remaining, as "OK small=OK/0 large=OVER/0".
func answer(t *testing.T, s *Server, req *rlspb.RateLimitRequest) string {
	t.Helper()
	resp, err := s.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	code := func(c rlspb.RateLimitResponse_Code) string {
		if c == rlspb.RateLimitResponse_OVER_LIMIT {
			return "OVER"
		}
		return c.String()
	}
	out := code(resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		name := st.GetCurrentLimit().GetName()
		if name == "" {
			name = fmt.Sprint(i)
		}
		out += fmt.Sprintf(" %s=%s/%d", name, code(st.GetCode()), st.GetLimitRemaining())
	}
	return out
}

// A quota descriptor over its limit fails the request only when every
// quota descriptor is over; an over one in an allowed request says so
// and is not charged; a denied request charges nothing; descriptors not
// in quota mode are all or nothing as always.
func TestQuotaMode(t *testing.T) {
	path := writeFile(t, t.TempDir(), "models.yaml", quotaYAML)
	s, clock := newServer(t, Settings{Paths: []string{path}})
	both := func() *rlspb.RateLimitRequest { return rlReq("models", 0, "model=small", "model=large") }
	peek := func(desc string) string {
		return answer(t, s, withHits(rlReq("models", 0, desc), 0, 0))
	}
	steps := []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{both(), "OK small=OK/0 large=OK/1"},
		// small is over, large is not: allowed, small reports its
		// denial, and only large is charged.
		{both(), "OK small=OVER/0 large=OK/0"},
		// Both over: denied.
		{both(), "OVER small=OVER/0 large=OVER/0"},
	}
	for i, st := range steps {
		if got := answer(t, s, st.req); got != st.want {
			t.Fatalf("step %d: %s, want %s", i, got, st.want)
		}
	}
	resp, _ := s.ShouldRateLimit(t.Context(), both())
	if got := header(resp, "Retry-After"); got != "50" {
		t.Errorf("all quotas over: Retry-After %q, want 50 (the minute's window ends in 50s)", got)
	}
	if got := counter(t, s, "sluice_decisions_total", "rule", "small", "result", resultOver); got != 3 {
		t.Errorf("small counted over %v times, want 3", got)
	}

	// The only quota descriptor over denies the request, and the user's
	// limit, within, is not charged: a denied request's other limits
	// report what they have left, uncharged.
	if got, want := answer(t, s, rlReq("models", 0, "model=small", "user=u1")), "OVER small=OVER/0 per_user=OK/2"; got != want {
		t.Errorf("one quota descriptor, over, and a user within: %s, want %s", got, want)
	}
	if got, want := peek("user=u1"), "OK per_user=OK/2"; got != want {
		t.Errorf("after a denied request: %s, want %s (nothing charged)", got, want)
	}
	// An unlimited descriptor is no quota descriptor.
	if got, want := answer(t, s, rlReq("models", 0, "model=small", "free=x")), "OVER small=OVER/0 1=OK/4294967295"; got != want {
		t.Errorf("a quota descriptor over beside an unlimited one: %s, want %s", got, want)
	}

	// A new window: a limit not in quota mode denies whatever the quotas
	// say, and charges nothing.
	clock.Advance(time.Minute)
	answer(t, s, rlReq("models", 0, "user=u2"))
	answer(t, s, rlReq("models", 0, "user=u2"))
	if got, want := answer(t, s, rlReq("models", 0, "model=small", "model=large", "user=u2")), "OVER small=OK/1 large=OK/2 per_user=OVER/0"; got != want {
		t.Errorf("user over, quotas within: %s, want %s", got, want)
	}
	if got, want := peek("model=small"), "OK small=OK/1"; got != want {
		t.Errorf("after the denied request: %s, want %s (nothing charged)", got, want)
	}
	// With the user within, one quota over: allowed, user and large
	// charged.
	answer(t, s, rlReq("models", 0, "model=small"))
	if got, want := answer(t, s, rlReq("models", 0, "model=small", "model=large", "user=u3")), "OK small=OVER/0 large=OK/1 per_user=OK/1"; got != want {
		t.Errorf("small over, large and user within: %s, want %s", got, want)
	}
	if got, want := peek("user=u3"), "OK per_user=OK/1"; got != want {
		t.Errorf("the user after an allowed request: %s, want %s", got, want)
	}
}

// Under global quota mode every descriptor is a quota descriptor: one of
// two over lets the request through, both over deny it, and a
// descriptor no limit applies to is never over.
func TestGlobalQuotaMode(t *testing.T) {
	path := writeFile(t, t.TempDir(), "models.yaml", quotaYAML)
	s, _ := newServer(t, Settings{Paths: []string{path}, QuotaMode: true})
	for i, st := range []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{rlReq("models", 0, "user=a", "user=b"), "OK per_user=OK/1 per_user=OK/1"},
		{rlReq("models", 0, "user=a", "user=b"), "OK per_user=OK/0 per_user=OK/0"},
		{rlReq("models", 0, "user=a", "user=c"), "OK per_user=OVER/0 per_user=OK/1"},
		{rlReq("models", 0, "user=a", "user=b"), "OVER per_user=OVER/0 per_user=OVER/0"},
		{rlReq("models", 0, "user=a", "nolimit=x"), "OK per_user=OVER/0 1=OK/0"},
	} {
		if got := answer(t, s, st.req); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
}

const metadataYAML = `domain: meta
descriptors:
  - key: service
    value: billing
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata:
      owner: payments
      tags: [pci]
      limits: {burst: 20}
  - key: service
    value: search
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      owner: discovery
      limits: {burst: 3, window: 1m}
  - key: service
    value: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata:
      closed: true
  - key: service
    value: free
    rate_limit: {unlimited: true}
    metadata:
      free: true
  - key: api_key
    secret: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// With DynamicMetadata the response carries the domain, the descriptors
// (secrets digested) and the metadata of those that passed, merged,
// the first descriptor's value winning; without, nothing.
func TestDynamicMetadata(t *testing.T) {
	path := writeFile(t, t.TempDir(), "meta.yaml", metadataYAML)
	req := withHits(rlReq("meta", 2, "service=billing", "service=search", "service=closed", "service=free", "api_key=sk_live_9"), 1, 1)

	off, _ := newServer(t, Settings{Paths: []string{path}})
	resp, err := off.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDynamicMetadata() != nil {
		t.Errorf("DynamicMetadata off: dynamic_metadata %v, want none", resp.GetDynamicMetadata())
	}

	e := start(t, Settings{Paths: []string{path}, DynamicMetadata: true})
	resp, err = e.rls.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("overall %v, want OVER_LIMIT (closed allows nothing)", resp.GetOverallCode())
	}
	got := resp.GetDynamicMetadata().AsMap()
	want := map[string]any{
		"domain":     "meta",
		"hitsAddend": 2.0,
		"descriptors": []any{
			map[string]any{"entries": []any{"service=billing"}},
			map[string]any{"entries": []any{"service=search"}, "hitsAddend": 1.0},
			map[string]any{"entries": []any{"service=closed"}},
			map[string]any{"entries": []any{"service=free"}},
			map[string]any{"entries": []any{"api_key=" + keys.Digest("sk_live_9")}},
		},
		// billing's and search's, billing first; not closed's (over) nor
		// free's (unlimited).
		"metadata": map[string]any{
			"owner":  "payments",
			"tags":   []any{"pci"},
			"limits": map[string]any{"burst": 20.0, "window": "1m"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dynamic_metadata =\n%v\nwant\n%v", got, want)
	}

	// The merge copied: a second response is the same.
	resp, _ = e.rls.ShouldRateLimit(t.Context(), rlReq("meta", 0, "service=search"))
	if got, want := resp.GetDynamicMetadata().AsMap()["metadata"], any(map[string]any{"owner": "discovery", "limits": map[string]any{"burst": 3.0, "window": "1m"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("search alone: metadata %v, want %v", got, want)
	}

	// POST /json carries it too.
	code, body := postJSON(t, e, `{"domain":"meta","descriptors":[{"entries":[{"key":"service","value":"billing"}]}]}`)
	if code != http.StatusOK || !strings.Contains(body, `"dynamicMetadata":{`) || !strings.Contains(body, `"owner":"payments"`) {
		t.Errorf("POST /json: %d %s, want 200 with the dynamic metadata", code, body)
	}
}

// MergeDomains loads a domain split across files, and keeps doing so on
// reload; without it the second definition is an error.
func TestMergeDomainsSetting(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {name: shop.user, unit: minute, requests_per_unit: 2}\n")
	writeFile(t, dir, "b.yaml", "domain: shop\ndescriptors:\n  - key: team\n    rate_limit: {name: shop.team, unit: minute, requests_per_unit: 1}\n")
	if _, err := New(Settings{Paths: []string{dir}, Store: newStore(t)}); err == nil {
		t.Fatal("New without MergeDomains loaded a domain defined twice")
	}
	s, _ := newServer(t, Settings{Paths: []string{dir}, MergeDomains: true, ReloadInterval: -1})
	check := func(when string) {
		t.Helper()
		for _, tt := range []struct{ desc, want string }{{"user=u", "OK shop.user=OK/1"}, {"team=t", "OK shop.team=OK/0"}} {
			if got := answer(t, s, rlReq("shop", 0, tt.desc)); got != tt.want {
				t.Errorf("%s: %s: %s, want %s", when, tt.desc, got, tt.want)
			}
		}
	}
	check("loaded")
	writeFile(t, dir, "b.yaml", "domain: shop\ndescriptors:\n  - key: team\n    rate_limit: {name: shop.team, unit: minute, requests_per_unit: 1}\n  - key: org\n    rate_limit: {name: shop.org, unit: minute, requests_per_unit: 1}\n")
	if err := s.Reload(t.Context()); err != nil {
		t.Fatalf("Reload of the merged files: %v", err)
	}
	if got, want := answer(t, s, rlReq("shop", 0, "org=o")), "OK shop.org=OK/0"; got != want {
		t.Errorf("after the reload: org=o: %s, want %s", got, want)
	}
}

// Two domains that declare the same rule keep their value_to_metric
// series apart across a reload that drops one of them: the other's
// decisions still count under its own domain.
func TestValueToMetricReloadKeepsDomains(t *testing.T) {
	dir := t.TempDir()
	domain := func(d string) string {
		return "domain: " + d + `
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {name: per_route_user, unit: minute, requests_per_unit: 5}
`
	}
	a := writeFile(t, dir, "a.yaml", domain("a"))
	b := writeFile(t, dir, "b.yaml", domain("b"))
	s, _ := newServer(t, Settings{Paths: []string{a, b}, ReloadInterval: -1})
	ctx := t.Context()
	decide := func() {
		t.Helper()
		if _, err := s.ShouldRateLimit(ctx, rlReq("b", 0, "route=/orders,user=alice")); err != nil {
			t.Fatal(err)
		}
	}
	decide()
	writeFile(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	decide()
	if got := counter(t, s, "sluice_value_decisions_total", "domain", "b", "rule", "per_route_user", "descriptor", "route=/orders|user", "result", resultWithin); got != 2 {
		t.Errorf("domain b's series after domain a's rule went: %v within, want 2", got)
	}
	if got := series(t, s, "sluice_value_decisions_total", "domain", "a"); len(got) != 0 {
		t.Errorf("domain a's rule is gone but %d of its value series remain", len(got))
	}
}
