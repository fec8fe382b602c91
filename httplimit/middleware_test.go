package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

func TestAllowedThenDenied(t *testing.T) {
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(3)}
	h := newHarness(t, httplimit.WithRule(perIP, httplimit.ClientIP()))
	steps := []struct {
		advance time.Duration
		code    int
		limit   string // RateLimit
		retry   string
	}{
		{0, 200, `"per-ip";r=2;t=20`, ""},
		{0, 200, `"per-ip";r=1;t=40`, ""},
		{0, 200, `"per-ip";r=0;t=60`, ""},
		{0, 429, `"per-ip";r=0;t=20`, "20"}, // t capped at Retry-After
		{20*time.Second - time.Nanosecond, 429, `"per-ip";r=0;t=1`, "1"},
		{time.Nanosecond, 200, `"per-ip";r=0;t=60`, ""},
	}
	for i, s := range steps {
		h.clock.Advance(s.advance)
		w := h.send("203.0.113.7:1234")
		got := [3]string{strconv.Itoa(w.Code), w.Header().Get("RateLimit"), w.Header().Get("Retry-After")}
		want := [3]string{strconv.Itoa(s.code), s.limit, s.retry}
		if got != want {
			t.Fatalf("step %d: status, RateLimit, Retry-After = %q, want %q", i, got, want)
		}
		if p := w.Header().Get("RateLimit-Policy"); p != `"per-ip";q=3;w=60` {
			t.Fatalf("step %d: RateLimit-Policy %q", i, p)
		}
	}
	// Another client is not affected.
	if w := h.send("203.0.113.8:1234"); w.Code != 200 {
		t.Fatalf("another client: %d", w.Code)
	}
}

func TestDeniedBody(t *testing.T) {
	a := sluice.Rule{Name: `per "ip"`, Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1)}
	b := sluice.Rule{Name: "all", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100)}
	shadow := sluice.Rule{Name: "shadow", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1), Shadow: true}
	h := newHarness(t, httplimit.WithRule(a, httplimit.ClientIP()), httplimit.WithRule(shadow, httplimit.ClientIP()), httplimit.WithRule(b, httplimit.Const("all")))
	h.send("192.0.2.1:1")
	w := h.send("192.0.2.1:1")
	if w.Code != 429 {
		t.Fatalf("status %d, want 429", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if !strings.HasSuffix(p.Type, "#quota-exceeded") || p.Status != 429 || !slices.Equal(p.Violated, []string{`per "ip"`}) {
		t.Fatalf("problem %+v", p)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"per \"ip\"";q=1;w=1, "all";q=100;w=1` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
}

// Two rules are decided together: a denial by one charges neither.
func TestRulesAllOrNothing(t *testing.T) {
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(2)}
	global := sluice.Rule{Name: "global", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 3, Period: 10 * time.Second}}
	h := newHarness(t, httplimit.WithRule(perIP, httplimit.ClientIP()), httplimit.WithRule(global, httplimit.Const("all")))
	steps := []struct {
		remote string
		code   int
		denied []string // by rule
	}{
		{"192.0.2.1:1", 200, nil},
		{"192.0.2.1:1", 200, nil},
		{"192.0.2.1:1", 429, []string{"per-ip"}}, // global not charged
		{"192.0.2.2:1", 200, nil},                // global's third unit
		{"192.0.2.2:1", 429, []string{"global"}},
		{"192.0.2.1:1", 429, []string{"per-ip", "global"}},
	}
	for i, s := range steps {
		w := h.send(s.remote)
		checks, res := h.last()
		var denied []string
		for j, d := range res.Decisions {
			if !d.Allowed {
				denied = append(denied, checks[j].Rule.Name())
			}
		}
		if w.Code != s.code || !slices.Equal(denied, s.denied) {
			t.Fatalf("step %d: %d denied by %q, want %d by %q", i, w.Code, denied, s.code, s.denied)
		}
	}
}

// After waiting exactly Retry-After seconds the same request passes; a
// second less, it does not. Random costs and times, every algorithm.
func TestRetryAfterNeverUnderReports(t *testing.T) {
	limits := []sluice.Limit{
		{Rate: 7, Period: 10 * time.Second},
		{Rate: 3, Period: 1500 * time.Millisecond, Burst: 5},
		{Rate: 10, Period: time.Minute},
		{Rate: 5, Period: 333 * time.Millisecond},
		{Rate: 1000, Period: time.Hour, Burst: 20},
	}
	for _, algo := range sluice.Algos() {
		for _, l := range limits {
			t.Run(fmt.Sprintf("%s/%v", algo, l), func(t *testing.T) {
				rule := sluice.Rule{Name: "r", Algorithm: algo, Limit: l}
				costOf := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }
				h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP()), httplimit.WithCost(costOf))
				rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
				capacity := rule.Quota()
				denials := 0
				step := 3 * int64(l.Period) / l.Rate // three units' refill, on average
				for range 300 {
					h.clock.Advance(time.Duration(rng.Int64N(step)))
					cost := strconv.FormatInt(1+rng.Int64N(capacity), 10)
					w := h.send("198.51.100.1:1", "X-Cost", cost)
					if w.Code == 200 {
						continue
					}
					denials++
					n, err := strconv.Atoi(w.Header().Get("Retry-After"))
					if err != nil {
						t.Fatalf("cost %s: Retry-After %q", cost, w.Header().Get("Retry-After"))
					}
					if n > 0 {
						h.clock.Advance(time.Duration(n-1) * time.Second)
						if w := h.send("198.51.100.1:1", "X-Cost", cost); w.Code != 429 {
							t.Fatalf("cost %s: allowed %d s before Retry-After %d: it over-reports", cost, 1, n)
						}
						h.clock.Advance(time.Second)
					}
					if w := h.send("198.51.100.1:1", "X-Cost", cost); w.Code != 200 {
						t.Fatalf("cost %s: denied after Retry-After %d s (RateLimit %q)", cost, n, w.Header().Get("RateLimit"))
					}
				}
				if denials == 0 {
					t.Fatal("no request was denied: the test proves nothing")
				}
			})
		}
	}
}

func TestStoreFailure(t *testing.T) {
	errDown := errors.New("store down")
	tests := []struct {
		failure sluice.Failure
		shadow  bool // global
		code    int
		retry   string
	}{
		{sluice.FailOpen, false, 200, ""},
		{sluice.FailClosed, false, 429, "1"},
		{sluice.FailLocal, false, 429, "1"}, // no fallback store: closed
		{sluice.FailClosed, true, 200, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/shadow=%v", tt.failure, tt.shadow), func(t *testing.T) {
			rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10), Failure: tt.failure}
			var hooked []error
			opts := []httplimit.Option{
				httplimit.WithRule(rule, httplimit.ClientIP()),
				httplimit.WithFailureHook(func(r *http.Request, err error) { hooked = append(hooked, err) }),
			}
			if tt.shadow {
				opts = append(opts, httplimit.WithShadow())
			}
			h := newHarness(t, opts...)
			h.store.fail(errDown)
			w := h.do("192.0.2.1:1")
			if w.Code != tt.code || w.Header().Get("Retry-After") != tt.retry {
				t.Fatalf("status %d, Retry-After %q; want %d, %q", w.Code, w.Header().Get("Retry-After"), tt.code, tt.retry)
			}
			if len(hooked) != 1 || !errors.Is(hooked[0], errDown) {
				t.Fatalf("failure hook got %v, want [%v]", hooked, errDown)
			}
			if _, res := h.last(); !errors.Is(res.Err, errDown) {
				t.Fatalf("observer's Result.Err = %v", res.Err)
			}
			if tt.shadow {
				if f := rateHeaders(w.Header()); len(f) > 0 {
					t.Fatalf("shadow mode set %q", f)
				}
				return
			}
			checks, res := h.last()
			agree(t, w, checks, res)
			if w.Header().Get("RateLimit-Policy") == "" {
				t.Fatal("no RateLimit-Policy")
			}
			// The store comes back: decisions are its own again.
			h.store.fail(nil)
			if w := h.send("192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit") == "" {
				t.Fatalf("after recovery: %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
			}
			if len(hooked) != 1 {
				t.Fatalf("failure hook called %d times", len(hooked))
			}
		})
	}
}

// Global shadow mode decides and charges as enforcement would, but serves
// every request and sets no field.
func TestShadowMode(t *testing.T) {
	rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(2)}
	h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP()), httplimit.WithShadow())
	var would []bool
	for range 4 {
		w := h.do("192.0.2.1:1")
		if w.Code != 200 {
			t.Fatalf("shadow mode denied: %d", w.Code)
		}
		if f := rateHeaders(w.Header()); len(f) > 0 {
			t.Fatalf("shadow mode set %q", f)
		}
		_, res := h.last()
		would = append(would, res.Allowed)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(would, want) || h.served != 4 {
		t.Fatalf("observed allowed %v, served %d; want %v, 4", would, h.served, want)
	}
	// Enforcing now, over the same store: exactly two were charged.
	enforce, err := httplimit.New(h.lim, httplimit.WithRule(rule, httplimit.ClientIP()))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	enforce.Handler(http.NotFoundHandler()).ServeHTTP(w, r)
	if w.Code != 429 {
		t.Fatalf("enforced after shadow: %d, want 429", w.Code)
	}
}

// A shadow rule is decided and observed but never denies and is not
// advertised.
func TestShadowRule(t *testing.T) {
	tiny := sluice.Rule{Name: "tiny", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(1), Shadow: true}
	big := sluice.Rule{Name: "big", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(100)}
	h := newHarness(t, httplimit.WithRule(tiny, httplimit.ClientIP()), httplimit.WithRule(big, httplimit.ClientIP()))
	for i := range 3 {
		w := h.send("192.0.2.1:1")
		_, res := h.last()
		if w.Code != 200 || res.Decisions[0].Allowed != (i == 0) {
			t.Fatalf("request %d: %d, shadow decision %+v", i, w.Code, res.Decisions[0])
		}
		if strings.Contains(w.Header().Get("RateLimit-Policy"), "tiny") {
			t.Fatalf("shadow rule advertised: %q", w.Header().Get("RateLimit-Policy"))
		}
	}
	// Only shadow rules: nothing is said at all.
	h = newHarness(t, httplimit.WithRule(tiny, httplimit.ClientIP()))
	h.do("192.0.2.1:1")
	if w := h.do("192.0.2.1:1"); w.Code != 200 || len(rateHeaders(w.Header())) > 0 {
		t.Fatalf("shadow only: %d, %v", w.Code, w.Header())
	}
}

func TestKeyErrors(t *testing.T) {
	perKey := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(1)}
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(5)}

	// What a client is told when it leaves out what a rule counts by: a
	// 400 naming the rule and the missing part, never a bare 500.
	for _, tt := range []struct {
		name   string
		key    httplimit.KeyFunc
		remote string
		want   []string // in the problem's detail
	}{
		{"api key", httplimit.APIKey("X-API-Key"), "192.0.2.1:1", []string{`rule "per-key"`, "no API key in the X-API-Key header"}},
		{"bearer token", httplimit.APIKey("Authorization"), "192.0.2.1:1", []string{"no API key in the Authorization header"}},
		{"header", httplimit.Header("X-User"), "192.0.2.1:1", []string{"no X-User header"}},
		{"join", httplimit.Join(httplimit.Route(), httplimit.Header("X-Tenant")), "192.0.2.1:1", []string{"no X-Tenant header"}},
		{"unix socket", httplimit.ClientIP(), "@", []string{`remote address "@" is not an IP address`}},
	} {
		t.Run("no key: "+tt.name, func(t *testing.T) {
			h := newHarness(t, httplimit.WithRule(perKey, tt.key))
			w := h.do(tt.remote)
			if w.Code != 400 || h.served != 0 || h.seen != 0 {
				t.Fatalf("no key: %d, served %d, observed %d; want 400, none, none", w.Code, h.served, h.seen)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json", ct)
			}
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if p.Type != "about:blank" || p.Title != "Bad Request" || p.Status != 400 {
				t.Fatalf("problem %+v", p)
			}
			for _, s := range tt.want {
				if !strings.Contains(p.Detail, s) {
					t.Errorf("detail %q does not say %q", p.Detail, s)
				}
			}
			if strings.Contains(p.Detail, "httplimit:") {
				t.Errorf("detail %q speaks of the package", p.Detail)
			}
			if len(rateHeaders(w.Header())) > 0 {
				t.Errorf("undecided request has rate-limit fields: %v", w.Header())
			}
		})
	}
	t.Run("key function failed", func(t *testing.T) {
		broken := func(*http.Request) (string, error) { return "", errors.New("user table unreachable") }
		h := newHarness(t, httplimit.WithRule(perKey, broken))
		w := h.do("192.0.2.1:1")
		if w.Code != 500 || h.served != 0 || h.seen != 0 {
			t.Fatalf("failed key: %d, served %d, observed %d", w.Code, h.served, h.seen)
		}
		if strings.Contains(w.Body.String(), "unreachable") {
			t.Fatalf("500 leaks details: %q", w.Body)
		}
	})
	t.Run("error handler", func(t *testing.T) {
		var got error
		h := newHarness(t, httplimit.WithRule(perKey, httplimit.APIKey("X-API-Key")),
			httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				got = err
				http.Error(w, "need a key", http.StatusUnauthorized)
			}))
		w := h.do("192.0.2.1:1")
		if w.Code != 401 || !errors.Is(got, httplimit.ErrNoKey) || !strings.Contains(got.Error(), `"per-key"`) {
			t.Fatalf("%d, err %v", w.Code, got)
		}
	})
	t.Run("optional", func(t *testing.T) {
		h := newHarness(t,
			httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("X-API-Key"))),
			httplimit.WithRule(perIP, httplimit.ClientIP()))
		w := h.send("192.0.2.1:1")
		checks, _ := h.last()
		if w.Code != 200 || len(checks) != 1 || checks[0].Rule.Name() != perIP.Name {
			t.Fatalf("without a key: %d, checks %+v", w.Code, checks)
		}
		if p := w.Header().Get("RateLimit-Policy"); p != `"per-ip";q=5;w=60` {
			t.Fatalf("RateLimit-Policy %q", p)
		}
		h.send("192.0.2.1:1", "X-API-Key", "k1")
		if w := h.send("192.0.2.1:1", "X-API-Key", "k1"); w.Code != 429 {
			t.Fatalf("second with a key: %d", w.Code)
		}
	})
	t.Run("every rule skipped", func(t *testing.T) {
		h := newHarness(t, httplimit.WithRule(perKey, httplimit.Optional(httplimit.Header("X-User"))))
		for range 3 {
			if w := h.do("192.0.2.1:1"); w.Code != 200 || len(w.Header()) > 1 {
				t.Fatalf("unlimited request: %d, %v", w.Code, w.Header())
			}
		}
		if h.seen != 0 {
			t.Fatalf("observed %d decisions, want none", h.seen)
		}
	})
	t.Run("context ended", func(t *testing.T) {
		h := newHarness(t, httplimit.WithRule(perIP, httplimit.ClientIP()))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		if w := h.serve(r, "192.0.2.1:1"); w.Code != 500 || h.served != 0 {
			t.Fatalf("canceled: %d, served %d", w.Code, h.served)
		}
	})
}

func TestCost(t *testing.T) {
	rule := sluice.Rule{Name: "bytes", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 100, Period: time.Second}}
	cost := func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
	}
	h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP()), httplimit.WithCost(cost))
	steps := []struct {
		cost  string
		code  int
		retry string
		limit string
	}{
		{"60", 200, "", `"bytes";r=40;t=1`},
		{"0", 200, "", `"bytes";r=40;t=1`}, // a peek
		{"50", 429, "1", `"bytes";r=40;t=1`},
		{"101", 429, "", `"bytes";r=40;t=1`}, // never: no Retry-After
		{"-1", 500, "", ""},
		{"x", 500, "", ""},
	}
	for _, s := range steps {
		w := h.do("192.0.2.1:1", "X-Cost", s.cost)
		got := [3]string{strconv.Itoa(w.Code), w.Header().Get("Retry-After"), w.Header().Get("RateLimit")}
		if want := [3]string{strconv.Itoa(s.code), s.retry, s.limit}; got != want {
			t.Fatalf("cost %s: status, Retry-After, RateLimit = %q, want %q", s.cost, got, want)
		}
		if w.Code != 500 {
			checks, res := h.last()
			agree(t, w, checks, res)
		}
	}
}

func TestLegacyHeaders(t *testing.T) {
	a := sluice.Rule{Name: "a", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(10)}
	b := sluice.Rule{Name: "b", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerHour(3)}
	h := newHarness(t, httplimit.WithRule(a, httplimit.ClientIP()), httplimit.WithRule(b, httplimit.ClientIP()), httplimit.WithLegacyHeaders())
	h.clock.Advance(30 * time.Second)
	w := h.send("192.0.2.1:1")
	got := []string{w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset")}
	// b is the most restrictive (2 left); Reset is when both are idle: b's
	// 20 minutes.
	if want := []string{"3", "2", "1200"}; !slices.Equal(got, want) {
		t.Fatalf("legacy fields %q, want %q", got, want)
	}
	h = newHarness(t, httplimit.WithRule(a, httplimit.ClientIP()))
	if w := h.send("192.0.2.1:1"); w.Header().Get("X-RateLimit-Limit") != "" {
		t.Fatal("legacy fields without WithLegacyHeaders")
	}
}

func TestRoute(t *testing.T) {
	rule := sluice.Rule{Name: "per-route", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(1)}
	h := newHarness(t, httplimit.WithRule(rule, httplimit.Route()))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", h.h)
	mux.Handle("/other/", h.h)
	steps := []struct {
		method, path, key string
		code              int
	}{
		{"GET", "/items/1", "GET /items/{id}", 200},
		{"GET", "/items/2", "GET /items/{id}", 429},  // one route, one limit
		{"HEAD", "/items/2", "GET /items/{id}", 429}, // served by GET's handler, counted as GET
		{"POST", "/other/x", "POST /other/", 200},
		{"M1", "/other/x", "OTHER /other/", 200},
		{"M2", "/other/x", "OTHER /other/", 429}, // a made-up method makes no new limit
	}
	for _, s := range steps {
		r := httptest.NewRequest(s.method, s.path, nil)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		checks, _ := h.last()
		if w.Code != s.code || checks[0].Key != s.key {
			t.Fatalf("%s %s: %d, key %q; want %d, %q", s.method, s.path, w.Code, checks[0].Key, s.code, s.key)
		}
	}
}

// Hostile requests never panic, are answered, and make small keys.
func TestHostileInput(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0")}
	rule := func(name string) sluice.Rule {
		return sluice.Rule{Name: name, Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(1000)}
	}
	h := newHarness(t,
		httplimit.WithRule(rule("ip"), httplimit.ClientIP(proxies...)),
		httplimit.WithRule(rule("user"), httplimit.Optional(httplimit.Header("X-User"))),
		httplimit.WithRule(rule("key"), httplimit.Optional(httplimit.APIKey("Authorization"))),
		httplimit.WithRule(rule("route"), httplimit.Route()),
		httplimit.WithRule(rule("tuple"), httplimit.Optional(httplimit.Join(httplimit.Header("X-User"), httplimit.Route()))),
		httplimit.WithLegacyHeaders(),
	)
	huge := strings.Repeat("A", 1<<20)
	cases := [][]string{
		{"X-Forwarded-For", huge},
		{"X-Forwarded-For", strings.Repeat("1.2.3.4,", 100_000)},
		{"X-Forwarded-For", strings.Repeat(",", 100_000)},
		{"X-Forwarded-For", strings.Repeat("10.0.0.1, ", 10_000)},
		{"X-Forwarded-For", "999.1.1.1, ::ffff:::, [::1, 1.2.3.4:99999, \x00\xff, 1.2.3.4%eth0"},
		{"X-Forwarded-For", "[fe80::1%" + huge + "]"},
		{"X-User", huge},
		{"X-User", "#" + huge},
		{"X-User", "a|b\\c|"},
		{"Authorization", "Bearer " + huge},
		{"Authorization", "Bearer"},
		{"Authorization", huge},
	}
	remotes := []string{"10.0.0.1:1", "[::1]:2", "garbage", "", "1.2.3.4", "[::ffff:1.2.3.4]", "1.2.3.4:99999"}
	for _, hdr := range cases {
		for _, remote := range remotes {
			hdr := append([]string(nil), hdr...)
			w := h.do(remote, hdr...)
			if w.Code != 200 && w.Code != 400 { // 400: a remote address that is not one
				t.Fatalf("remote %q, %s of %d bytes: %d", remote, hdr[0], len(hdr[1]), w.Code)
			}
		}
	}
	r := httptest.NewRequest("GET", "/"+huge, nil)
	h.serve(r, "10.0.0.1:1")
	r = httptest.NewRequest(strings.Repeat("M", 1000), "/", nil)
	h.serve(r, "10.0.0.1:1")
	if n := h.store.maxKey; n > 4*httplimit.MaxKeyLen+1 {
		t.Fatalf("longest key %d bytes", n)
	}
	for k := range h.store.seen() {
		if strings.Contains(k, "AAAA") && len(k) > httplimit.MaxKeyLen {
			t.Fatalf("raw hostile value in key %q", k)
		}
	}
}

// Many clients at once, through one middleware: the limit holds exactly
// and no response sees another's fields.
func TestConcurrent(t *testing.T) {
	rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(50)}
	h := newHarness(t, httplimit.WithRule(rule, httplimit.Const("all")))
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	remaining := map[string]bool{}
	for g := range 8 {
		wg.Go(func() {
			for range 25 {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", g)
				w := httptest.NewRecorder()
				h.h.ServeHTTP(w, r)
				mu.Lock()
				codes[w.Code]++
				if w.Code == 200 {
					remaining[w.Header().Get("RateLimit")] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if codes[200] != 50 || codes[429] != 150 {
		t.Fatalf("codes %v, want 50 allowed and 150 denied", codes)
	}
	if len(remaining) != 50 {
		t.Fatalf("%d distinct RateLimit values among 50 allowed, want 50 (r=49..0)", len(remaining))
	}
}

func TestNew(t *testing.T) {
	lim, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	ok := sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
	tests := []struct {
		name string
		lim  *sluice.Limiter
		opts []httplimit.Option
		want string // in the error; "" for none
	}{
		{"fine", lim, []httplimit.Option{httplimit.WithRule(ok, httplimit.ClientIP())}, ""},
		{"nil options ignored", lim, []httplimit.Option{nil, httplimit.WithRule(ok, httplimit.ClientIP())}, ""},
		{"no limiter", nil, []httplimit.Option{httplimit.WithRule(ok, httplimit.ClientIP())}, "limiter is nil"},
		{"no rules", lim, nil, "no rules"},
		{"zero rule", lim, []httplimit.Option{httplimit.WithRule(sluice.Rule{}, httplimit.ClientIP())}, "no name"},
		{"nil key", lim, []httplimit.Option{httplimit.WithRule(ok, nil)}, "no key function"},
		{"invalid rule", lim, []httplimit.Option{httplimit.WithRule(sluice.Rule{Name: "bad", Algorithm: sluice.AlgoGCRA}, httplimit.ClientIP())}, "period"},
		{"unknown algorithm", lim, []httplimit.Option{httplimit.WithRule(sluice.Rule{Name: "bad", Algorithm: "magic", Limit: sluice.PerSecond(1)}, httplimit.ClientIP())}, "unknown algorithm"},
		{"twice", lim, []httplimit.Option{httplimit.WithRule(ok, httplimit.ClientIP()), httplimit.WithRule(ok, httplimit.Route())}, "twice"},
		{"same name", lim, []httplimit.Option{httplimit.WithRule(ok, httplimit.ClientIP()), httplimit.WithRule(sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}, httplimit.Route())}, "twice"},
		{"non-ASCII name", lim, []httplimit.Option{httplimit.WithRule(sluice.Rule{Name: "café", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}, httplimit.ClientIP())}, "printable ASCII"},
		{"control in name", lim, []httplimit.Option{httplimit.WithRule(sluice.Rule{Name: "a\nb", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}, httplimit.ClientIP())}, "printable ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := httplimit.New(tt.lim, tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want == "" && m == nil:
				t.Fatal("New returned nil")
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New: %v, want an error with %q", err, tt.want)
			case tt.want != "" && !strings.HasPrefix(err.Error(), "httplimit: "):
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := httplimit.New(lim); !errors.Is(err, httplimit.ErrNoRules) {
		t.Fatalf("New without rules: %v, want ErrNoRules", err)
	}
}

// WithRule copies the rule: what the caller does with its own afterwards
// changes neither the limit nor the fields.
func TestRuleCopied(t *testing.T) {
	rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(1)}
	opt := httplimit.WithRule(rule, httplimit.ClientIP())
	rule.Name, rule.Limit = "changed", sluice.PerMinute(100)
	h := newHarness(t, opt)
	rule.Shadow = true
	for i, want := range []int{200, 429} {
		w := h.send("192.0.2.1:1")
		if w.Code != want || w.Header().Get("RateLimit-Policy") != `"r";q=1;w=60` {
			t.Fatalf("request %d: %d, RateLimit-Policy %q; want %d, %q", i, w.Code, w.Header().Get("RateLimit-Policy"), want, `"r";q=1;w=60`)
		}
	}
}

// A custom denied handler gets the result, after the fields are set.
func TestDeniedHandler(t *testing.T) {
	rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(1)}
	var got sluice.Result
	h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP()),
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, res sluice.Result) {
			got = res
			if w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
				t.Errorf("denied handler called before the fields were set: %v", w.Header())
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
	h.do("192.0.2.1:1")
	w := h.do("192.0.2.1:1")
	if w.Code != 503 || got.Allowed || got.RetryAfter != time.Minute {
		t.Fatalf("%d, result %+v", w.Code, got)
	}
}

func TestNilNext(t *testing.T) {
	lim, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	rule := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}
	m, err := httplimit.New(lim, httplimit.WithRule(rule, httplimit.ClientIP()))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 404 || w.Header().Get("RateLimit") == "" {
		t.Fatalf("nil next: %d, %v", w.Code, w.Header())
	}
}
