package httplimit_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// usageServer is a middleware with a token budget per API key (WithUsage)
// and, if gate is set, a limit on requests per API key beside it, around
// a handler that reports the tokens in the request's X-Tokens header.
type usageServer struct {
	clock   *fakeClock
	store   *testStore
	h       http.Handler
	mu      sync.Mutex
	failed  []error // told to the failure hook
	handler func(w http.ResponseWriter, r *http.Request)
}

var tokens = sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(100)}

func newUsageServer(t *testing.T, opts ...httplimit.Option) *usageServer {
	t.Helper()
	u := &usageServer{clock: newClock(t0), store: newStore(t)}
	lim, err := sluice.NewLimiter(u.store, sluice.WithClock(u.clock))
	if err != nil {
		t.Fatal(err)
	}
	u.handler = func(w http.ResponseWriter, r *http.Request) {
		if n := r.Header.Get("X-Tokens"); n != "" {
			// Reported in two parts, as a streamed answer would.
			var v int64
			for _, c := range n {
				v = v*10 + int64(c-'0')
			}
			if err := httplimit.ReportUsage(r.Context(), v/2); err != nil {
				t.Error(err)
			}
			if err := httplimit.ReportUsage(r.Context(), v-v/2); err != nil {
				t.Error(err)
			}
		}
		w.Write([]byte("answer"))
	}
	opts = append([]httplimit.Option{
		httplimit.WithUsage(tokens, httplimit.APIKey("X-API-Key")),
		httplimit.WithFailureHook(func(_ *http.Request, err error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.failed = append(u.failed, err)
		}),
	}, opts...)
	m, err := httplimit.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	u.h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { u.handler(w, r) }))
	return u
}

// ask sends a request for API key key whose answer uses n tokens.
func (u *usageServer) ask(key, n string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-API-Key", key)
	r.Header.Set("X-Tokens", n)
	w := httptest.NewRecorder()
	u.h.ServeHTTP(w, r)
	return w
}

// A request is checked at cost 0 on the way in and charged the tokens its
// handler reported on the way out, whatever is left: an answer of 150
// tokens on a budget of 100 takes the key into debt, and the requests
// after it are refused, 429 naming the budget, until the debt drains.
func TestUsage(t *testing.T) {
	u := newUsageServer(t)
	for i, step := range []struct {
		advance time.Duration
		key     string
		tokens  string
		code    int
		left    string // RateLimit's r on the way in
	}{
		{0, "k1", "60", 200, "r=100"},
		{0, "k1", "90", 200, "r=40"}, // 40 left: allowed, and charged 90 into debt
		{0, "k1", "1", 429, "r=0"},   // in debt
		{0, "k2", "1", 200, "r=100"}, // another key
		{time.Hour, "k1", "10", 200, "r=100"},
	} {
		u.clock.Advance(step.advance)
		w := u.ask(step.key, step.tokens)
		if w.Code != step.code || !strings.Contains(w.Header().Get("RateLimit"), step.left) {
			t.Errorf("request %d (%s, %s tokens): %d, RateLimit %q; want %d with %s", i+1, step.key, step.tokens, w.Code, w.Header().Get("RateLimit"), step.code, step.left)
		}
		if w.Code == 429 && !strings.Contains(w.Body.String(), `"tokens"`) {
			t.Errorf("request %d: body %s does not name the budget", i+1, w.Body)
		}
	}
	if len(u.failed) != 0 {
		t.Errorf("failures: %v", u.failed)
	}
}

// A rule given with WithRule beside a WithUsage one is charged the
// request's cost on the way in, and only when every rule, the usage one
// included, allows; the usage rule is charged the tokens on the way out.
func TestUsageBesideRule(t *testing.T) {
	perKey := sluice.Rule{Name: "requests", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(3)}
	u := newUsageServer(t, httplimit.WithRule(perKey, httplimit.APIKey("X-API-Key")))
	for i, step := range []struct {
		tokens string
		code   int
		fields string
	}{
		{"150", 200, `"tokens";r=100;t=0, "requests";r=2;t=3600`},
		{"0", 429, `"tokens";r=0;t=3600, "requests";r=2;t=3600`}, // in debt: requests not charged
		{"0", 429, `"tokens";r=0;t=3600, "requests";r=2;t=3600`},
	} {
		w := u.ask("k", step.tokens)
		if w.Code != step.code || w.Header().Get("RateLimit") != step.fields {
			t.Errorf("request %d: %d, RateLimit %q; want %d with %s", i+1, w.Code, w.Header().Get("RateLimit"), step.code, step.fields)
		}
	}
}

// A request whose handler reports no usage is charged nothing: a check's
// cost of 0 means one unit, so the middleware makes no charge at all.
func TestUsageZero(t *testing.T) {
	u := newUsageServer(t)
	for i := range 3 {
		if w := u.ask("k", "0"); w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit"), "r=100;") {
			t.Fatalf("request %d after answers of 0 tokens: %d, RateLimit %q; want 100 left", i+1, w.Code, w.Header().Get("RateLimit"))
		}
	}
}

// The charge is made when the handler returns though the client has gone,
// and when the handler panics after reporting: the work was done.
func TestUsageChargedWhatever(t *testing.T) {
	u := newUsageServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	u.handler = func(w http.ResponseWriter, r *http.Request) {
		httplimit.ReportUsage(r.Context(), 60)
		cancel() // the client hangs up before the answer is done
	}
	r := httptest.NewRequestWithContext(ctx, "POST", "/v1/chat", nil)
	r.Header.Set("X-API-Key", "k")
	u.h.ServeHTTP(httptest.NewRecorder(), r)

	u.handler = func(w http.ResponseWriter, r *http.Request) {
		httplimit.ReportUsage(r.Context(), 30)
		panic(http.ErrAbortHandler)
	}
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		u.ask("k", "")
	}()
	u.handler = func(w http.ResponseWriter, r *http.Request) {}
	if w := u.ask("k", ""); w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit"), "r=10;") {
		t.Errorf("after 60 and 30 tokens: %d, RateLimit %q; want 10 left", w.Code, w.Header().Get("RateLimit"))
	}
}

// A charge the store fails to record is told to the failure hook, and the
// answer already given stands.
func TestUsageChargeFails(t *testing.T) {
	u := newUsageServer(t)
	down := errors.New("store down")
	u.handler = func(w http.ResponseWriter, r *http.Request) {
		httplimit.ReportUsage(r.Context(), 40)
		u.store.fail(down)
		w.Write([]byte("answer"))
	}
	w := u.ask("k", "")
	if w.Code != 200 || w.Body.String() != "answer" {
		t.Errorf("%d %q, want the handler's answer", w.Code, w.Body)
	}
	if len(u.failed) != 1 || !errors.Is(u.failed[0], down) || !strings.Contains(u.failed[0].Error(), "charging 40") {
		t.Errorf("failure hook heard %v, want one failure to charge 40", u.failed)
	}
}

// ReportUsage refuses a negative usage and changes nothing; it is a no-op
// for a request no WithUsage rule applies to, and it saturates.
func TestReportUsage(t *testing.T) {
	if err := httplimit.ReportUsage(t.Context(), 5); err != nil {
		t.Errorf("ReportUsage outside a limited request = %v, want nil", err)
	}
	u := newUsageServer(t)
	u.handler = func(w http.ResponseWriter, r *http.Request) {
		if err := httplimit.ReportUsage(r.Context(), -1); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("ReportUsage(-1) = %v, want an error", err)
		}
		httplimit.ReportUsage(r.Context(), 10)
		httplimit.ReportUsage(r.Context(), math.MaxInt64)
	}
	if w := u.ask("k", ""); w.Code != 200 {
		t.Fatalf("%d, want 200", w.Code)
	}
	u.handler = func(w http.ResponseWriter, r *http.Request) {}
	if w := u.ask("k", ""); w.Code != 429 || len(u.failed) != 0 {
		t.Errorf("after a saturated charge: %d, failures %v; want 429, none", w.Code, u.failed)
	}
	// Two periods on, the debt, capped, has drained.
	u.clock.Advance(2 * time.Hour)
	if w := u.ask("k", ""); w.Code != 200 {
		t.Errorf("two hours on: %d, want 200", w.Code)
	}
}
