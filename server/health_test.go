package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// /healthcheck answers as envoyproxy/ratelimit's: 200 "OK" while
// serving, to any method; 500 with no body once shutdown begins. gRPC
// health answers for its service name, "ratelimit", too.
func TestHealthcheck(t *testing.T) {
	e := start(t, Settings{DrainDelay: time.Second})
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		req, _ := http.NewRequestWithContext(t.Context(), m, e.base+"/healthcheck", nil)
		code, _, body := do(t, req)
		if want := map[bool]string{true: "", false: "OK"}[m == http.MethodHead]; code != 200 || body != want {
			t.Errorf("%s /healthcheck: %d %q, want 200 %q", m, code, body, want)
		}
	}
	hr, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of \"ratelimit\": %v, %v", hr, err)
	}
	e.cancel() // shutdown begins; the drain keeps the listener open a second
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, body := get(t, e.base+"/healthcheck")
		if code == http.StatusInternalServerError && body == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck during shutdown: %d %q, want 500 with no body", code, body)
		}
		time.Sleep(10 * time.Millisecond) // the shutdown runs on its own goroutine
	}
	e.stop(t)
}

// StartWithoutConfig serves no domain until the files load, and
// HealthRequiresConfig reports unhealthy until then.
func TestStartWithoutConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if _, err := New(Settings{Store: newStore(t), Paths: []string{path}}); err == nil {
		t.Fatal("New with a missing config: no error")
	}
	srv, clock := newServer(t, Settings{Paths: []string{path}, StartWithoutConfig: true, HealthRequiresConfig: true, ReloadInterval: 10 * time.Millisecond})
	e := serve(t, srv, clock)
	if code, _, _ := get(t, e.base+"/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck with no domain: %d, want 500", code)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=early"))
	if err != nil || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("before the config: %v, %v; want OK with no limit", resp, err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "test.yaml", testYAML)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for len(srv.Domains()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the config written later was not loaded within 10s")
		case <-time.After(10 * time.Millisecond): // the watcher polls on its own time
		}
	}
	if code, _, body := get(t, e.base+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck with the config: %d %q", code, body)
	}
	if st := limitOf(t, srv, "user=late"); st.GetCurrentLimit().GetName() != "per_user" {
		t.Errorf("after the config loaded: %v", st)
	}
}
