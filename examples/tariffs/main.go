// Command tariffs limits API keys by their plan (free, pro, enterprise),
// each with its own limits per minute and per day, where a search costs 5
// and any other request 1: in sluice serve's YAML (tariffs.yaml, asked as
// a gateway asks), and in the library (library.go). It shows each plan's
// limits holding, and a change to a plan taking effect on a reload.
//
//	go run ./examples/tariffs
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server"
)

//go:embed tariffs.yaml
var tariffsYAML string

func main() {
	os.Exit(run(context.Background(), os.Stdout, os.Stderr))
}

func run(ctx context.Context, stdout, stderr io.Writer) int {
	if err := demo(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "tariffs:", err)
		return 1
	}
	return 0
}

// newService returns the rate-limit service on the config file at path,
// deciding at clock's time, as `sluice serve --config path` runs it.
func newService(path string, store sluice.Store, clock sluice.Clock) (*server.Server, error) {
	return server.New(server.Settings{Paths: []string{path}, Store: store, Clock: clock})
}

// ask asks the service about one request, as a gateway does with POST
// /json: the key's plan and the key, at the request's cost. It returns
// the HTTP status, 200 or 429, and the Retry-After the service says to
// send the client.
func ask(ctx context.Context, svc http.Handler, plan, apiKey string, cost int64) (code int, retryAfter string, err error) {
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	body, err := json.Marshal(map[string]any{
		"domain":      "api",
		"descriptors": []map[string]any{{"entries": []entry{{"plan", plan}, {"api_key", apiKey}}}},
		"hitsAddend":  cost,
	})
	if err != nil {
		return 0, "", err
	}
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/json", bytes.NewReader(body))
	w := httptest.NewRecorder()
	svc.ServeHTTP(w, r)
	var resp struct {
		ResponseHeadersToAdd []entry `json:"responseHeadersToAdd"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		return 0, "", fmt.Errorf("POST /json: %d %s", w.Code, w.Body)
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == "Retry-After" {
			retryAfter = h.Value
		}
	}
	return w.Code, retryAfter, nil
}

// searches sends searches at one instant until one is denied, and says how
// many passed and the denial's Retry-After.
func searches(search func() (code int, retryAfter string, err error)) (allowed int, retryAfter string, err error) {
	for range 100_000 {
		code, ra, err := search()
		if err != nil {
			return allowed, "", err
		}
		if code != http.StatusOK {
			return allowed, ra, nil
		}
		allowed++
	}
	return allowed, "", fmt.Errorf("no search denied after %d", allowed)
}

// demo runs on a clock it moves itself, so that it prints the same every
// time.
func demo(ctx context.Context, w io.Writer) error {
	t0 := time.Date(2026, time.March, 2, 12, 0, 0, 0, time.UTC)
	clock := &manualClock{now: t0}

	// The service, on tariffs.yaml in a directory of its own, so that the
	// file can change.
	dir, err := os.MkdirTemp("", "sluice-tariffs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tariffs.yaml")
	if err := os.WriteFile(path, []byte(tariffsYAML), 0o644); err != nil {
		return err
	}
	store, err := memory.New()
	if err != nil {
		return err
	}
	defer store.Close()
	svc, err := newService(path, store, clock)
	if err != nil {
		return err
	}
	search := func(plan, key string) func() (int, string, error) {
		return func() (int, string, error) { return ask(ctx, svc.Handler(), plan, key, 5) }
	}

	fmt.Fprintln(w, "sluice serve on tariffs.yaml, asked as a gateway asks (POST /json),")
	fmt.Fprintln(w, "searches at 12:00:00, each costing 5:")
	for _, p := range []string{"free", "pro", "enterprise"} {
		n, ra, err := searches(search(p, "key-"+p))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-10s %5d allowed, then 429, Retry-After: %s\n", p, n, ra)
	}

	fmt.Fprintln(w, "\nPro's limit raised to 1200 a minute in tariffs.yaml and reloaded, as")
	fmt.Fprintln(w, "the file watcher or SIGHUP does; the changed limit starts afresh:")
	raised := strings.Replace(tariffsYAML, "requests_per_unit: 600\n", "requests_per_unit: 1200\n", 1)
	if err := os.WriteFile(path, []byte(raised), 0o644); err != nil {
		return err
	}
	if err := svc.Reload(ctx); err != nil {
		return err
	}
	n, ra, err := searches(search("pro", "key-pro"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %-10s %5d allowed, then 429, Retry-After: %s\n", "pro", n, ra)

	fmt.Fprintln(w, "\nAnother free key searches all day, 12 times a minute (60 units, its limit):")
	total := 0
	for m := 0; ; m++ {
		clock.set(t0.Add(time.Duration(m) * time.Minute))
		n, ra, err := searches(search("free", "key-free-2"))
		if err != nil {
			return err
		}
		total += n
		if n < 12 {
			fmt.Fprintf(w, "  by %s, %d allowed (1000 units, its daily limit), then 429, Retry-After: %s (00:00 UTC)\n",
				clock.Now().Format("15:04"), total, ra)
			break
		}
	}

	fmt.Fprintln(w, "\nThe same tariffs in the library (library.go: one httplimit middleware per")
	fmt.Fprintln(w, "plan), GET /v1/search at 12:00:00:")
	clock.set(t0)
	libStore, err := memory.New()
	if err != nil {
		return err
	}
	defer libStore.Close()
	limiter, err := sluice.NewLimiter(libStore, sluice.WithClock(clock))
	if err != nil {
		return err
	}
	accounts := map[string]string{"key-free": "free", "key-pro": "pro", "key-enterprise": "enterprise"}
	api, err := limitByPlan(limiter, func(k string) (string, bool) { p, ok := accounts[k]; return p, ok },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "results") }))
	if err != nil {
		return err
	}
	var denied http.Header
	for _, p := range []string{"free", "pro", "enterprise"} {
		n, ra, err := searches(func() (int, string, error) {
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/search?q=sluice", nil)
			r.Header.Set("X-API-Key", "key-"+p)
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, r)
			if p == "free" && rec.Code != http.StatusOK {
				denied = rec.Header()
			}
			return rec.Code, rec.Header().Get("Retry-After"), nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-10s %5d allowed, then 429, Retry-After: %s\n", p, n, ra)
	}
	fmt.Fprintln(w, "The free key's 429 says why:")
	fmt.Fprintf(w, "  RateLimit-Policy: %s\n", denied.Get("RateLimit-Policy"))
	fmt.Fprintf(w, "  RateLimit: %s\n", denied.Get("RateLimit"))
	return nil
}

// manualClock is a sluice.Clock that the demo and the tests move by hand.
// A service uses sluice.SystemClock.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
