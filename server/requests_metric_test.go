package server

import (
	"fmt"
	"testing"
)

// sluice_requests_total counts a request once, whatever the descriptors
// it carries, and every domain the config lacks under one label, so that
// a client naming new domains adds no series.
func TestRequestsTotalOncePerRequestAndUnknownDomainsBounded(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "path=/free", "path=/free")); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, e.srv, "sluice_requests_total", "domain", "test", "result", "within"); got != 1 {
		t.Errorf("requests in test = %v, want 1 for one request of two descriptors", got)
	}
	for i := range 50 {
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq(fmt.Sprintf("nowhere-%d", i), 0, "user=alice")); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, e.srv, "sluice_requests_total", "domain", labelUnknownDomain, "result", "within"); got != 50 {
		t.Errorf("requests in unknown domains = %v, want 50", got)
	}
	domains := map[string]bool{}
	for _, m := range series(t, e.srv, "sluice_requests_total") {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "domain" {
				domains[lp.GetValue()] = true
			}
		}
	}
	if len(domains) != 2 {
		t.Errorf("sluice_requests_total domains %v, want test and %s only", domains, labelUnknownDomain)
	}
}

// A request counts as over when denied, and as shadow_over when allowed
// although a limit in shadow mode would have denied it.
func TestRequestsTotalResults(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for range 3 {
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "trial=x")); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=gina")); err != nil {
			t.Fatal(err)
		}
	}
	for result, want := range map[string]float64{"within": 4, "shadow_over": 2, "over": 1} {
		if got := counter(t, e.srv, "sluice_requests_total", "domain", "test", "result", result); got != want {
			t.Errorf("requests %s = %v, want %v", result, got, want)
		}
	}
}
