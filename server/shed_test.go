package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/teststore"
)

// A request the store shed (too much in flight towards it) is over the
// limit, never an error and never allowed, whatever the failure mode
// (testYAML's rules fail open): OVER_LIMIT to gRPC, 429 to /json, each
// with Retry-After: 1; counted per domain in sluice_shed_total, not as a
// store error.
func TestShed(t *testing.T) {
	e := start(t, Settings{Store: teststore.Shedding{}})
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=a"))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v, want an answer", err)
	}
	if resp.GetOverallCode() != over || header(resp, "Retry-After") != "1" {
		t.Errorf("gRPC: %v, want OVER_LIMIT with Retry-After 1", resp)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
	code, _, body := do(t, req)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `{"key":"Retry-After","value":"1"}`) {
		t.Errorf("/json: %d %s, want 429 with Retry-After 1 among the headers to add", code, body)
	}
	if n := counter(t, e.srv, "sluice_shed_total", "domain", "test"); n != 2 {
		t.Errorf("sluice_shed_total{domain=test} = %v, want 2", n)
	}
	if n := counter(t, e.srv, "sluice_store_errors_total"); n != 0 {
		t.Errorf("sluice_store_errors_total = %v, want 0: a shed is not a failure", n)
	}
}

// A request the failure modes decided, the store having failed, is
// counted in sluice_store_errors_total and logged at warning level, at
// most once a second, with how many there were.
func TestFailureModeLogged(t *testing.T) {
	logs := &logBuffer{}
	e := start(t, Settings{Store: teststore.Failing{}, Logger: logs.logger()})
	ask := func() {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=a"))
		if err != nil || resp.GetOverallCode() != ok {
			t.Fatalf("ShouldRateLimit = %v, %v; want OK: the rule fails open", resp, err)
		}
	}
	for range 50 {
		ask()
	}
	if n := counter(t, e.srv, "sluice_store_errors_total"); n != 50 {
		t.Errorf("sluice_store_errors_total = %v, want 50", n)
	}
	const msg = "the rules' failure modes decided"
	if n := strings.Count(logs.String(), msg); n != 1 {
		t.Fatalf("%d warnings within a second, want 1:\n%s", n, logs)
	}
	e.clock.Advance(time.Second)
	ask()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var warns []string
	for _, l := range lines {
		if strings.Contains(l, msg) {
			warns = append(warns, l)
		}
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "level=WARN") || !strings.Contains(warns[1], "requests=50") {
		t.Errorf("warnings %q: want two, the second counting the 50 requests since the first", warns)
	}
}
