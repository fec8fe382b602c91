package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memory"
)

func ExampleNew() {
	// A fixed clock keeps the output the same; servers leave it out.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		log.Fatal(err)
	}

	// Two requests a minute per client, behind a load balancer in 10.0.0.0/8.
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(2)}
	m, err := httplimit.New(limiter,
		httplimit.WithRule(perIP, httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))),
	)
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))

	for range 3 {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.RemoteAddr = "10.0.0.1:4321" // the load balancer
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s", w.Code, w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Printf(" Retry-After: %s", ra)
		}
		fmt.Println()
	}
	// Output:
	// 200 RateLimit: "per-ip";r=1;t=30
	// 200 RateLimit: "per-ip";r=0;t=60
	// 429 RateLimit: "per-ip";r=0;t=30 Retry-After: 30
}

// Limits per API key where there is one, and per client address always.
func ExampleOptional() {
	perKey := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100)}
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(10)}
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	m, err := httplimit.New(limiter,
		httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("Authorization"))),
		httplimit.WithRule(perIP, httplimit.ClientIP()),
	)
	if err != nil {
		log.Fatal(err)
	}
	h := m.Handler(http.NotFoundHandler())

	for _, auth := range []string{"", "Bearer k3y"} {
		r := httptest.NewRequest("GET", "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// "per-ip";q=10;w=1
	// "per-key";q=100;w=1, "per-ip";q=10;w=1
}

// Keys made of several parts cannot collide.
func ExampleJoin() {
	key := httplimit.Join(httplimit.Header("X-Tenant"), httplimit.Route())
	r := httptest.NewRequest("POST", "/upload", nil)
	r.Header.Set("X-Tenant", "acme|eu")
	k, err := key(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k)
	// Output: acme\|eu|POST /upload
}

// A rule keyed by an API key answers a request without one 400, naming
// what is missing. Wrap the key in Optional to let such requests through,
// limited by the other rules (see Optional).
func ExampleAPIKey() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	perKey := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(50)}
	m, err := httplimit.New(limiter, httplimit.WithRule(perKey, httplimit.APIKey("X-API-Key")))
	if err != nil {
		log.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, key := range []string{"", "k3y"} {
		r := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Content-Type"))
		fmt.Print(w.Body)
	}
	// Output:
	// 400 application/problem+json
	// {"type":"about:blank","title":"Bad Request","status":400,"detail":"rule \"per-key\": request has no key: no API key in the X-API-Key header"}
	// 200
}

// The usual pair: a limit per client address always, and one per API key
// when the request sends one. The README shows it as a whole program.
func Example_perAddressAndKey() {
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	mux := http.NewServeMux()

	store, err := memory.New(memory.WithMaxKeys(1_000_000)) // or redis.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}

	// Per client address always (behind load balancers in 10.0.0.0/8), and per
	// API key when the request sends one.
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)}
	perKey := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(10_000)}
	m, err := httplimit.New(limiter,
		httplimit.WithRule(perIP, httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))),
		httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("X-API-Key"))),
	)
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("/", m.Handler(app))

	for _, key := range []string{"", "k3y"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4321" // the load balancer
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "per-ip";q=10;w=1
	// 200 "per-ip";q=10;w=1, "per-key";q=10000;w=86400
}

// An LLM token budget per API key: each request is checked on the way in
// and charged, once the model has answered, the tokens it used.
func ExampleWithUsage() {
	// A fixed clock keeps the output the same; servers leave it out.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		log.Fatal(err)
	}

	budget := sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(1000)}
	m, err := httplimit.New(limiter, httplimit.WithUsage(budget, httplimit.APIKey("X-API-Key")))
	if err != nil {
		log.Fatal(err)
	}
	chat := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := int64(600) // the tokens the model's answer says it used
		httplimit.ReportUsage(r.Context(), used)
		fmt.Fprintln(w, "answer")
	}))

	for range 3 {
		r := httptest.NewRequest("POST", "/v1/chat", nil)
		r.Header.Set("X-API-Key", "sk-test")
		w := httptest.NewRecorder()
		chat.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s\n", w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 RateLimit: "tokens";r=1000;t=0
	// 200 RateLimit: "tokens";r=400;t=3600
	// 429 RateLimit: "tokens";r=0;t=3600
}
