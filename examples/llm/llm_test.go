package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// The demo prints what README.md shows.
func TestDemo(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(t.Context(), &out, &errs); code != 0 {
		t.Fatalf("run = %d: %s", code, errs.String())
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+out.String()+"```") {
		t.Errorf("README.md does not show the demo's output:\n%s", out.String())
	}
}

// newChat is the library's chat on a clock stopped at t0, its model
// answering with the tokens the test gives.
func newChat(t *testing.T, tokens *int64) (http.Handler, *manualClock) {
	t.Helper()
	store, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := &manualClock{now: t0}
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h, err := chat(limiter, func(string) (string, int64) { return "answer", *tokens })
	if err != nil {
		t.Fatal(err)
	}
	return h, clock
}

func postChat(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat", strings.NewReader(url.Values{"prompt": {"hi"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-API-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Through the library: an answer longer than what is left is charged in
// full, and the key is refused until the hour is over; one that fits
// exactly leaves the key at 0, refused too.
func TestLibraryBudget(t *testing.T) {
	tokens := int64(999)
	h, clock := newChat(t, &tokens)
	if w := postChat(h, "k"); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	tokens = 1500
	if w := postChat(h, "k"); w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit"), "r=1;") {
		t.Fatalf("with 1 token left: %d, RateLimit %q; want 200 with 1 left", w.Code, w.Header().Get("RateLimit"))
	}
	w := postChat(h, "k")
	if w.Code != 429 || w.Header().Get("Retry-After") != "3000" {
		t.Errorf("in debt: %d, Retry-After %q; want 429 until the hour's end, 3000", w.Code, w.Header().Get("Retry-After"))
	}
	clock.set(t0.Add(50 * time.Minute))
	tokens = 1000
	if w := postChat(h, "k"); w.Code != 200 {
		t.Errorf("next hour: %d, want 200", w.Code)
	}
	if w := postChat(h, "k"); w.Code != 429 {
		t.Errorf("with exactly 0 left: %d, want 429 (a check needs one token)", w.Code)
	}
}

// Through the service, as Envoy asks over gRPC and POST /json: the check
// is refused once an answer took the key past its budget, and both paths
// count the same key.
func TestServiceBudget(t *testing.T) {
	clock := &manualClock{now: t0}
	svc, stop, err := startService(t.Context(), clock)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := t.Context()
	for i, step := range []struct {
		via    asker
		tokens uint64
		ok     bool
		left   uint32
	}{
		{svc.grpc, 700, true, 1000},
		{svc.json, 700, true, 300}, // charged 700 of 300: 400 into debt
		{svc.grpc, 1, false, 0},
		{svc.json, 1, false, 0},
	} {
		ok, left, err := gatewayRequest(ctx, step.via, "sk-shared", step.tokens)
		if err != nil {
			t.Fatal(err)
		}
		if ok != step.ok || left != step.left {
			t.Errorf("request %d: check OK %v with %d left, want %v with %d", i+1, ok, left, step.ok, step.left)
		}
	}
	clock.set(t0.Add(50 * time.Minute))
	if ok, left, err := gatewayRequest(ctx, svc.grpc, "sk-shared", 1); err != nil || !ok || left != 1000 {
		t.Errorf("next hour: %v with %d left, %v; want OK with 1000", ok, left, err)
	}
}
