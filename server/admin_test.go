package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminDo sends a request to h and decodes a JSON answer into v (if not
// nil), returning the status and the body.
func adminDo(t *testing.T, h http.Handler, method, path, body string, v any) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, "http://127.0.0.1:6070"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if v != nil && rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, rec.Body)
		}
	}
	return rec.Code, rec.Header(), rec.Body.String()
}

// jsonPost posts a one-descriptor request to the service's POST /json.
func jsonPost(t *testing.T, s *Server, domain, key, value string) int {
	t.Helper()
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, domain, key, value)
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/json", strings.NewReader(body))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec.Code
}

func TestAdminUI(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	code, hdr, body := adminDo(t, h, "GET", "/ui/", "", nil)
	if code != http.StatusOK || !strings.Contains(body, "<!doctype html>") {
		t.Fatalf("GET /ui/: %d %.80q", code, body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy: %q", csp)
	}
	if code, hdr, _ := adminDo(t, h, "GET", "/", "", nil); code != http.StatusFound || hdr.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want a redirect to /ui/", code, hdr.Get("Location"))
	}

	// Without UI: no console and no playground; the JSON stays.
	off := s.AdminHandler(AdminOptions{})
	if code, _, _ := adminDo(t, off, "GET", "/ui/", "", nil); code != http.StatusNotFound {
		t.Errorf("UI off: GET /ui/: %d, want 404", code)
	}
	if code, _, _ := adminDo(t, off, "POST", "/v1/simulate", `{}`, nil); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Errorf("UI off: POST /v1/simulate: %d, want 404", code)
	}
	if code, _, _ := adminDo(t, off, "GET", "/v1/stats", "", nil); code != http.StatusOK {
		t.Errorf("UI off: GET /v1/stats: %d, want 200", code)
	}
}

// The admin listener answers only to IP addresses, localhost and the
// names it is told: a page on another name that resolves to loopback (DNS
// rebinding) cannot read it. A POST must be JSON, which a cross-origin
// page cannot send without a preflight.
func TestAdminRefusesOtherHostsAndForms(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true, Hosts: []string{"admin.internal"}})
	for host, want := range map[string]int{
		"127.0.0.1:6070": 200, "[::1]:6070": 200, "localhost:6070": 200, "LOCALHOST": 200, "x.localhost:6070": 200,
		"admin.internal:6070": 200, "evil.example:6070": 403, "127.0.0.1.evil.example": 403, "": 403,
	} {
		req := httptest.NewRequestWithContext(t.Context(), "GET", "/v1/policy", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
	req := httptest.NewRequestWithContext(t.Context(), "POST", "http://127.0.0.1/v1/simulate", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("POST text/plain: %d, want 415", rec.Code)
	}
}

// The statistics count what the service decided, per second, per domain
// and rule, and hold no key or value.
func TestAdminStats(t *testing.T) {
	s, clock := newServer(t, Settings{})
	s.admin.Sample(clock.Now()) // primes
	for range 4 {
		jsonPost(t, s, "test", "user", "secret-alice")
	}
	clock.Advance(time.Second)
	s.admin.Sample(clock.Now())
	jsonPost(t, s, "test", "trial", "secret-bob")
	jsonPost(t, s, "test", "trial", "secret-bob")
	clock.Advance(time.Second)
	s.admin.Sample(clock.Now())

	var st statsReport
	code, _, body := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/stats", "", &st)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/stats: %d %s", code, body)
	}
	if strings.Contains(body, "secret-") {
		t.Errorf("the stats hold a descriptor value: %s", body)
	}
	if len(st.Seconds) != 2 || st.Seconds[1]-st.Seconds[0] != 1 {
		t.Fatalf("seconds %v, want two in a row", st.Seconds)
	}
	rule := func(name string) ruleReport {
		for _, r := range st.Rules {
			if r.Domain == "test" && r.Rule == name {
				return r
			}
		}
		t.Fatalf("no rule %q in %s", name, body)
		return ruleReport{}
	}
	if r := rule("per_user"); fmt.Sprint(r.Within, r.Over) != "[3 0] [1 0]" || r.Total.Within != 3 || r.Total.Over != 1 {
		t.Errorf("per_user: within %v over %v total %+v; want [3 0] [1 0], 3 and 1", r.Within, r.Over, r.Total)
	}
	if r := rule("trial"); fmt.Sprint(r.Within, r.ShadowOver) != "[0 1] [0 1]" {
		t.Errorf("trial (shadow): within %v shadow_over %v; want [0 1] [0 1]", r.Within, r.ShadowOver)
	}
	if len(st.Requests) != 1 || st.Requests[0].Domain != "test" || st.Requests[0].Rule != "" ||
		fmt.Sprint(st.Requests[0].Within, st.Requests[0].Over, st.Requests[0].ShadowOver) != "[3 1] [1 0] [0 1]" {
		t.Errorf("requests %+v, want domain test: within [3 1], over [1 0], shadow_over [0 1]", st.Requests)
	}
	if fmt.Sprint(st.Latency.Decisions) != "[4 2]" || st.Latency.MeanMs[0] <= 0 || st.Latency.P99Ms[0] == nil {
		t.Errorf("latency %+v, want 4 and 2 decisions with a mean and p99", st.Latency)
	}
	if st.Store.Name == "" || st.Store.Health != "ok" || st.Store.Keys == nil {
		t.Errorf("store %+v, want a memory store, ok", st.Store)
	}
	if !strings.Contains(st.Note, "This process only") {
		t.Errorf("note %q", st.Note)
	}
}

// A request that meets two limits counts once among the requests, and
// under each limit among the decisions: denied by per_user, it is still
// within per_ip, which had room.
func TestAdminStatsCountsRequestsOnce(t *testing.T) {
	s, clock := newServer(t, Settings{})
	s.admin.Sample(clock.Now()) // primes
	body := `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"carol"}]},{"entries":[{"key":"ip","value":"192.0.2.1"}]}]}`
	codes := map[int]int{}
	for range 5 {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/json", strings.NewReader(body))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		codes[rec.Code]++
	}
	if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("answers %v, want 3 allowed and 2 denied by per_user", codes)
	}
	clock.Advance(time.Second)
	s.admin.Sample(clock.Now())
	var st statsReport
	if code, _, out := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/stats", "", &st); code != http.StatusOK {
		t.Fatalf("GET /v1/stats: %d %s", code, out)
	}
	if len(st.Requests) != 1 || st.Requests[0].Total.Within != 3 || st.Requests[0].Total.Over != 2 {
		t.Errorf("requests %+v, want 3 within and 2 over: one count per request", st.Requests)
	}
	perLimit := map[string]string{}
	for _, r := range st.Rules {
		perLimit[r.Rule] = fmt.Sprintf("%d %d", r.Total.Within, r.Total.Over)
	}
	if perLimit["per_user"] != "3 2" || perLimit["per_ip"] != "5 0" {
		t.Errorf("decisions per limit %v, want per_user 3 within 2 over, per_ip 5 within", perLimit)
	}
}

func TestAdminPolicy(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "test.yaml", testYAML)
	s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1})
	h := s.AdminHandler(AdminOptions{})
	var p policyReport
	if code, _, body := adminDo(t, h, "GET", "/v1/policy", "", &p); code != http.StatusOK {
		t.Fatalf("GET /v1/policy: %d %s", code, body)
	}
	if len(p.Domains) != 1 || p.Domains[0].Name != "test" || p.LastReload != nil || p.Domains[0].ForwardAuth == "" {
		t.Fatalf("policy %+v", p)
	}
	var bucket *limitReport
	for i, l := range p.Domains[0].Limits {
		if l.Name == "bucket" {
			bucket = &p.Domains[0].Limits[i]
		}
	}
	if bucket == nil || bucket.Algorithm != "token_bucket" || bucket.Rate != 5 || bucket.Period != "10s" || bucket.Burst != 10 ||
		bucket.File != path || bucket.Line != 35 || bucket.Descriptor[0].Key != "bucket" {
		t.Errorf("bucket: %+v, want token_bucket 5/10s burst 10 at %s:35", bucket, path)
	}

	// A reload that fails is reported with its file and line; the last
	// good config still serves.
	if err := os.WriteFile(path, []byte("domain: test\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(t.Context()); err == nil {
		t.Fatal("Reload of a bad config: nil error")
	}
	p = policyReport{}
	adminDo(t, h, "GET", "/v1/policy", "", &p)
	if p.LastReload == nil || p.LastReload.OK || len(p.LastReload.Errors) == 0 {
		t.Fatalf("last reload %+v, want a failure", p.LastReload)
	}
	if e := p.LastReload.Errors[0]; e.File != path || e.Line != 5 || !strings.Contains(e.Field, "unit") {
		t.Errorf("reload error %+v, want %s:5 at the unit", e, filepath.Base(path))
	}
	if len(p.Domains[0].Limits) != 7 {
		t.Errorf("after the failed reload: %d limits, want the last good config's 7", len(p.Domains[0].Limits))
	}
}

// A lookup peeks: it shows each matched limit's state and charges nothing.
func TestAdminLookup(t *testing.T) {
	s, _ := newServer(t, Settings{})
	for range 2 {
		jsonPost(t, s, "test", "user", "alice")
	}
	if code, _, _ := adminDo(t, s.AdminHandler(AdminOptions{UI: true}), "POST", "/v1/lookup", `{}`, nil); code != http.StatusNotFound {
		t.Errorf("lookup off: %d, want 404", code)
	}
	h := s.AdminHandler(AdminOptions{Lookup: true})
	body := `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice"}]},{"entries":[{"key":"bucket","value":"x"}]}]}`
	for range 3 {
		var lr lookupResponse
		if code, _, b := adminDo(t, h, "POST", "/v1/lookup", body, &lr); code != http.StatusOK {
			t.Fatalf("lookup: %d %s", code, b)
		}
		if len(lr.Descriptors) != 2 || len(lr.Descriptors[0].Limits) != 1 {
			t.Fatalf("lookup: %+v", lr)
		}
		l := lr.Descriptors[0].Limits[0]
		if l.Rule != "per_user" || l.Remaining != 1 || l.Quota != 3 || l.RetryMs != 0 || l.Line == 0 || l.ResetMs != 50_000 {
			t.Errorf("per_user: %+v, want 1 of 3 left, reset in 50s, at a line", l)
		}
		if b := lr.Descriptors[1].Limits[0]; b.Remaining != 10 || b.ResetMs != 0 {
			t.Errorf("bucket of an unseen key: %+v, want 10 left", b)
		}
	}
	if code := jsonPost(t, s, "test", "user", "alice"); code != http.StatusOK {
		t.Errorf("the third request after lookups: %d, want 200 (lookups charge nothing)", code)
	}
	var lr lookupResponse
	adminDo(t, h, "POST", "/v1/lookup", body, &lr)
	if l := lr.Descriptors[0].Limits[0]; l.Remaining != 0 || l.RetryMs != 50_000 || !l.RetryExact {
		t.Errorf("per_user used up: %+v, want 0 left, retry in 50s", l)
	}
	for _, bad := range []string{`{"domain":"nope","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`, `{"domain":"test"}`, `{"domain":"test","x":1}`} {
		if code, _, b := adminDo(t, h, "POST", "/v1/lookup", bad, nil); code != http.StatusBadRequest || !strings.Contains(b, `"error"`) {
			t.Errorf("lookup %s: %d %s, want 400 with an error", bad, code, b)
		}
	}
}

// The bucket's retry from a peek is the time one unit takes to refill.
func TestLookupBucketRetry(t *testing.T) {
	s, clock := newServer(t, Settings{})
	for range 10 {
		jsonPost(t, s, "test", "bucket", "b")
	}
	clock.Advance(500 * time.Millisecond) // 5 per 10s: a unit every 2s
	var lr lookupResponse
	adminDo(t, s.AdminHandler(AdminOptions{Lookup: true}), "POST", "/v1/lookup", `{"domain":"test","descriptors":[{"entries":[{"key":"bucket","value":"b"}]}]}`, &lr)
	if l := lr.Descriptors[0].Limits[0]; l.Remaining != 0 || l.RetryMs != 1500 || !l.RetryExact || l.ResetMs != 19_500 {
		t.Errorf("bucket: %+v, want 0 left, retry 1.5s, reset 19.5s", l)
	}
}

// ServeAdmin serves until its context ends, then returns nil.
func TestServeAdmin(t *testing.T) {
	s, _ := newServer(t, Settings{})
	ln := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.ServeAdmin(ctx, ln, AdminOptions{UI: true}) }()
	code, _, body := get(t, "http://"+ln.Addr().String()+"/v1/stats")
	if code != http.StatusOK || !strings.Contains(body, `"window_seconds":300`) {
		t.Errorf("GET /v1/stats: %d %.100s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeAdmin = %v, want nil", err)
	}
}

// The profiles are served only when asked for: a heap profile can show
// keys.
func TestAdminProfile(t *testing.T) {
	s, _ := newServer(t, Settings{})
	if code, _, _ := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/debug/pprof/", "", nil); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ without Profile: %d, want 404", code)
	}
	h := s.AdminHandler(AdminOptions{Profile: true})
	if code, _, body := adminDo(t, h, "GET", "/debug/pprof/", "", nil); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ with Profile: %d %.80q", code, body)
	}
	if code, _, _ := adminDo(t, h, "GET", "/debug/pprof/heap?debug=1", "", nil); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap with Profile: %d", code)
	}
}
