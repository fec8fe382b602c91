package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server"
)

var t0 = time.Date(2026, time.March, 2, 12, 0, 0, 0, time.UTC)

// Each plan's per-minute limit, in searches of cost 5 at one instant,
// and the Retry-After of the first search denied: the limit over 5, and
// the time for 5 units to come back.
var perMinute = []struct {
	plan       string
	searches   int
	retryAfter string
}{
	{"free", 12, "5"}, // 60 a minute: one unit a second
	{"pro", 120, "1"}, // 600 a minute: 5 units in 0.5s
	{"enterprise", 1200, "1"},
	{"platinum", 12, "5"}, // a plan tariffs.yaml does not name: the free plan's limits
}

// startService returns the service on a copy of tariffs.yaml, the copy's
// path, and the clock it decides at, stopped at t0.
func startService(t *testing.T) (*server.Server, string, *manualClock) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tariffs.yaml")
	if err := os.WriteFile(path, []byte(tariffsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := &manualClock{now: t0}
	svc, err := newService(path, store, clock)
	if err != nil {
		t.Fatal(err)
	}
	return svc, path, clock
}

// serviceSearch is one search by key, asked of the service.
func serviceSearch(t *testing.T, svc *server.Server, plan, key string) func() (int, string, error) {
	return func() (int, string, error) { return ask(t.Context(), svc.Handler(), plan, key, 5) }
}

func TestServicePlans(t *testing.T) {
	svc, _, _ := startService(t)
	for _, p := range perMinute {
		n, ra, err := searches(serviceSearch(t, svc, p.plan, "key-"+p.plan))
		if err != nil {
			t.Fatal(err)
		}
		if n != p.searches || ra != p.retryAfter {
			t.Errorf("%s: %d searches, then Retry-After %q; want %d, then %q", p.plan, n, ra, p.searches, p.retryAfter)
		}
	}
	// Other requests cost 1: after 11 searches a free key has 5 units
	// left of its minute, so 5 of those, then none.
	for range 11 {
		if code, _, _ := ask(t.Context(), svc.Handler(), "free", "key-free-2", 5); code != 200 {
			t.Fatalf("search: %d", code)
		}
	}
	for i := range 5 {
		if code, _, _ := ask(t.Context(), svc.Handler(), "free", "key-free-2", 1); code != 200 {
			t.Fatalf("request %d of cost 1: %d", i+1, code)
		}
	}
	if code, ra, _ := ask(t.Context(), svc.Handler(), "free", "key-free-2", 1); code != 429 || ra != "1" {
		t.Errorf("a request of cost 1 with nothing left: %d, Retry-After %q; want 429, 1", code, ra)
	}
}

// A free key's day: 1000 units, 200 searches, whatever the minute allows;
// then nothing until 00:00 UTC.
func TestServiceDailyLimit(t *testing.T) {
	svc, _, clock := startService(t)
	total := 0
	for m := range 16 {
		clock.set(t0.Add(time.Duration(m) * time.Minute))
		n, _, err := searches(serviceSearch(t, svc, "free", "key-free"))
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	clock.set(t0.Add(16 * time.Minute))
	n, ra, err := searches(serviceSearch(t, svc, "free", "key-free"))
	if err != nil {
		t.Fatal(err)
	}
	total += n
	if total != 200 || ra != "42240" {
		t.Fatalf("%d searches by 12:16, then Retry-After %q; want 200, then 42240 (until 00:00)", total, ra)
	}
	clock.set(time.Date(2026, time.March, 3, 0, 0, 0, 0, time.UTC))
	if code, _, _ := ask(t.Context(), svc.Handler(), "free", "key-free", 5); code != 200 {
		t.Fatalf("at midnight: %d, want 200", code)
	}
}

// A change to the plans takes effect on reload: pro raised to 1200 a
// minute, free lowered to 30; enterprise, unchanged, keeps its count.
func TestServiceReload(t *testing.T) {
	svc, path, _ := startService(t)
	for _, p := range []string{"pro", "enterprise"} {
		if _, _, err := searches(serviceSearch(t, svc, p, "key-"+p)); err != nil {
			t.Fatal(err)
		}
	}
	changed := strings.NewReplacer(
		"requests_per_unit: 600\n", "requests_per_unit: 1200\n",
		"name: free_per_minute\n            algorithm: gcra\n            unit: minute\n            requests_per_unit: 60\n",
		"name: free_per_minute\n            algorithm: gcra\n            unit: minute\n            requests_per_unit: 30\n",
	).Replace(tariffsYAML)
	if changed == tariffsYAML || strings.Count(changed, "requests_per_unit: 30\n") != 1 {
		t.Fatal("the edit did not apply to tariffs.yaml")
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		plan, key string
		searches  int
	}{
		{"pro", "key-pro", 240},             // the changed limit starts afresh
		{"free", "key-free", 6},             // 30 a minute
		{"enterprise", "key-enterprise", 0}, // unchanged: still spent
	} {
		n, _, err := searches(serviceSearch(t, svc, want.plan, want.key))
		if err != nil {
			t.Fatal(err)
		}
		if n != want.searches {
			t.Errorf("%s after the reload: %d searches, want %d", want.plan, n, want.searches)
		}
	}
}

// keyLog is a store that notes the keys it is asked about.
type keyLog struct {
	sluice.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	k.mu.Lock()
	for _, c := range checks {
		k.keys = append(k.keys, c.Key)
	}
	k.mu.Unlock()
	return k.Store.Take(ctx, now, checks, out)
}

// Every plan marks api_key secret: the store sees the key's digest only.
func TestServiceKeysByDigest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tariffs.yaml")
	if err := os.WriteFile(path, []byte(tariffsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &keyLog{Store: mem}
	svc, err := newService(path, store, &manualClock{now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range perMinute {
		if code, _, err := ask(t.Context(), svc.Handler(), p.plan, "sk_live_4eC39HqLyjWDarjtT1zdp7dc", 1); code != 200 || err != nil {
			t.Fatalf("%s: %d %v", p.plan, code, err)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.keys) != 2*len(perMinute) {
		t.Fatalf("the store was asked about %d keys, want %d", len(store.keys), 2*len(perMinute))
	}
	for _, k := range store.keys {
		if strings.Contains(k, "sk_live") {
			t.Errorf("the store was asked about %q", k)
		}
	}
}

// newLibraryAPI returns the library's API, limited by plan, with the
// accounts key-PLAN on PLAN, and key-platinum on a plan the library does
// not list.
func newLibraryAPI(t *testing.T) (http.Handler, *manualClock) {
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
	planOf := func(key string) (string, bool) { return strings.CutPrefix(key, "key-") }
	api, err := limitByPlan(limiter, planOf, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if err != nil {
		t.Fatal(err)
	}
	return api, clock
}

func get(api http.Handler, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if key != "" {
		r.Header.Set("X-API-Key", key)
	}
	w := httptest.NewRecorder()
	api.ServeHTTP(w, r)
	return w
}

func TestLibraryPlans(t *testing.T) {
	api, _ := newLibraryAPI(t)
	for _, p := range perMinute {
		n, ra, err := searches(func() (int, string, error) {
			w := get(api, "/v1/search", "key-"+p.plan)
			return w.Code, w.Header().Get("Retry-After"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != p.searches || ra != p.retryAfter {
			t.Errorf("%s: %d searches, then Retry-After %q; want %d, then %q", p.plan, n, ra, p.searches, p.retryAfter)
		}
	}
	if w := get(api, "/v1/search", "key-free"); !strings.Contains(w.Header().Get("RateLimit"), `"free_per_minute";r=0;t=5`) {
		t.Errorf("RateLimit %q, want free_per_minute spent", w.Header().Get("RateLimit"))
	}
	if w := get(api, "/v1/search", "nobody"); w.Code != http.StatusUnauthorized {
		t.Errorf("an unknown key: %d, want 401", w.Code)
	}
}

// Other requests cost 1: after 11 searches a free key has 5 units left
// for this minute, so 5 item requests, and no search.
func TestLibraryCost(t *testing.T) {
	api, clock := newLibraryAPI(t)
	for i := range 11 {
		if w := get(api, "/v1/search", "key-free"); w.Code != 200 {
			t.Fatalf("search %d: %d", i+1, w.Code)
		}
	}
	for i := range 5 {
		if w := get(api, "/v1/items", "key-free"); w.Code != 200 {
			t.Fatalf("item request %d: %d", i+1, w.Code)
		}
	}
	if w := get(api, "/v1/items", "key-free"); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("an item request with nothing left: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
	clock.set(t0.Add(5 * time.Second))
	if w := get(api, "/v1/search", "key-free"); w.Code != 200 {
		t.Fatalf("a search 5s later: %d, want 200", w.Code)
	}
}

func TestDemo(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(t.Context(), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := out.String(); got != demoOutput {
		t.Fatalf("the demo printed\n%s\nwant\n%s", got, demoOutput)
	}
}

const demoOutput = `sluice serve on tariffs.yaml, asked as a gateway asks (POST /json),
searches at 12:00:00, each costing 5:
  free          12 allowed, then 429, Retry-After: 5
  pro          120 allowed, then 429, Retry-After: 1
  enterprise  1200 allowed, then 429, Retry-After: 1

Pro's limit raised to 1200 a minute in tariffs.yaml and reloaded, as
the file watcher or SIGHUP does; the changed limit starts afresh:
  pro          240 allowed, then 429, Retry-After: 1

Another free key searches all day, 12 times a minute (60 units, its limit):
  by 12:16, 200 allowed (1000 units, its daily limit), then 429, Retry-After: 42240 (00:00 UTC)

The same tariffs in the library (library.go: one httplimit middleware per
plan), GET /v1/search at 12:00:00:
  free          12 allowed, then 429, Retry-After: 5
  pro          120 allowed, then 429, Retry-After: 1
  enterprise  1200 allowed, then 429, Retry-After: 1
The free key's 429 says why:
  RateLimit-Policy: "free_per_minute";q=60;w=60, "free_per_day";q=1000;w=86400
  RateLimit: "free_per_minute";r=0;t=5, "free_per_day";r=940;t=5
`
