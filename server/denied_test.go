package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// problem is the part of a denial's body that httplimit and the service
// share.
type problem struct {
	ContentType string
	Type        string `json:"type"`
	Title       string `json:"title"`
	Status      int    `json:"status"`
}

func parseProblem(t *testing.T, h http.Header, body string) problem {
	t.Helper()
	p := problem{ContentType: h.Get("Content-Type")}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("denial body %q is not JSON: %v", body, err)
	}
	return p
}

// A client that handles a 429 from httplimit handles one from forward auth:
// the same problem+json body, as deny_status has it.
func TestAuthDeniedBody(t *testing.T) {
	// What httplimit answers.
	l, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	rule := sluice.Rule{Name: "per_user", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(1)}
	m, err := httplimit.New(l, httplimit.WithRule(rule, httplimit.Const("alice")))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var w *httptest.ResponseRecorder
	for range 2 {
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	}
	want, w0 := parseProblem(t, w.Header(), w.Body.String()), w.Body.String()
	if w.Code != 429 || want.ContentType != "application/problem+json" || !strings.HasSuffix(want.Type, "#quota-exceeded") {
		t.Fatalf("httplimit's denial: %d %+v", w.Code, want)
	}

	for _, status := range []int{429, 403} {
		yaml := strings.Replace(testYAML, "deny_status: 429", fmt.Sprintf("deny_status: %d", status), 1)
		e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "test.yaml", yaml)}})
		for range 3 {
			get(t, e.base+"/v1/auth", "X-User", "alice", "X-Real-IP", testClient)
		}
		code, hdr, body := get(t, e.base+"/v1/auth", "X-User", "alice", "X-Real-IP", testClient)
		if code != status {
			t.Fatalf("deny_status %d: 4th request %d", status, code)
		}
		got := parseProblem(t, hdr, body)
		w := want
		w.Status = status
		if got != w {
			t.Errorf("deny_status %d: body %+v, want httplimit's %+v", status, got, w)
		}
		if !strings.Contains(body, `"violated-policies":["per_user"]`) || !strings.Contains(w0, `"violated-policies":["per_user"]`) {
			t.Errorf("deny_status %d: body %s, want the violated rule named as httplimit names it (%s)", status, body, w0)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("deny_status %d: X-Content-Type-Options %q", status, hdr.Get("X-Content-Type-Options"))
		}
	}
}
