package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
)

// gateStore holds every Take at a gate until the test opens it.
type gateStore struct {
	sluice.Store
	entered chan struct{}
	gate    chan struct{}
}

func (g *gateStore) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.Take(ctx, now, checks, out)
}

// within waits for ch to be closed or to receive, for 30s at most.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("still waiting after 30s for %s", what)
	}
}

// Cancelling Serve's context (SIGTERM in the command) under load: every
// request in flight is answered, and Serve returns nil. The shutdown
// timeout, past which requests are cut, is far beyond what answering them
// takes on a loaded machine.
func TestShutdownFinishesInFlight(t *testing.T) {
	const perKind = 8
	g := &gateStore{entered: make(chan struct{}, 3*perKind), gate: make(chan struct{})}
	g.Store = newStore(t)
	e := start(t, Settings{Store: g, ShutdownTimeout: 30 * time.Second})
	var once sync.Once
	openGate := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(openGate) // a test that fails early leaves no request held
	ctx := t.Context()

	var wg sync.WaitGroup
	errs := make(chan error, 3*perKind)
	for i := range perKind {
		wg.Go(func() {
			resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "org=acme,user=g"+string(rune('a'+i))))
			if err == nil && resp.GetOverallCode() != ok {
				err = errors.New("gRPC: not OK")
			}
			errs <- err
		})
		wg.Go(func() {
			code, out := postJSON(t, e, `{"domain": "test", "descriptors": [{"entries": [{"key": "bucket", "value": "j"}]}]}`)
			if code != 200 || !strings.Contains(out, "statuses") {
				errs <- errors.New("/json: " + out)
				return
			}
			errs <- nil
		})
		wg.Go(func() {
			code, _, body := get(t, e.base+"/v1/auth", "X-User", "auth"+string(rune('a'+i)), "X-Real-IP", testClient)
			if code != 200 {
				errs <- errors.New("/v1/auth: " + body)
				return
			}
			errs <- nil
		})
	}
	timeout := time.After(30 * time.Second)
	for i := range 3 * perKind {
		select {
		case <-g.entered: // the request is in flight, held in the store
		case <-timeout:
			t.Fatalf("after 30s, %d of %d requests have reached the store", i, 3*perKind)
		}
	}
	e.cancel()
	within(t, e.srv.draining, "the shutdown to begin")
	if e.srv.ready.Load() {
		t.Error("ready while shutting down")
	}
	openGate()
	answered := make(chan struct{})
	go func() {
		wg.Wait()
		close(answered)
	}()
	within(t, answered, "the requests in flight to be answered")
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	e.stop(t)
}

// Shutdown reports not ready first, and keeps serving through the drain
// delay. The checks below must be done within it: 5s, for a loaded
// machine, though it makes the test that long.
func TestShutdownReadinessFirst(t *testing.T) {
	e := start(t, Settings{DrainDelay: 5 * time.Second})
	e.waitReady(t)
	ctx := t.Context()
	if code, _, _ := get(t, e.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz before shutdown: %d", code)
	}
	// Open the connection the checks below use before the shutdown.
	if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=z")); err != nil {
		t.Fatal(err)
	}
	e.cancel()
	within(t, e.srv.draining, "the shutdown to begin")
	if code, _, _ := get(t, e.base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", code)
	}
	for _, svc := range []string{"", rlsService} {
		resp, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q while draining: %v, %v; want NOT_SERVING", svc, resp, err)
		}
	}
	if resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=z")); err != nil || resp.GetOverallCode() != ok {
		t.Errorf("a request while draining: %v, %v; want it served", resp, err)
	}
	e.stop(t)
}

func TestServeTwice(t *testing.T) {
	e := start(t, Settings{})
	e.waitReady(t)
	if code, _, _ := get(t, e.base+"/readyz"); code != 200 { // the first Serve runs
		t.Fatalf("/readyz: %d", code)
	}
	hl, gl := listen(t), listen(t)
	if err := e.srv.Serve(t.Context(), hl, gl); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("second Serve = %v, want an error", err)
	}
}
