package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testredis"
	sredis "github.com/sluicehq/sluice/redis"
)

// keyLog is a store that records the keys it is asked about.
type keyLog struct {
	sluice.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	k.mu.Lock()
	for _, c := range checks {
		k.keys = append(k.keys, c.Rule.Name()+" "+c.Key)
	}
	k.mu.Unlock()
	return k.Store.Take(ctx, now, checks, out)
}

// An API key never reaches the store, however it arrives (RLS, POST /json
// or forward auth), and it is one key, one count, on every path.
func TestSecretKeyedByDigest(t *testing.T) {
	const apiKey = "sk_live_51HqLyjWDarjtT1zdp7dc"
	st := &keyLog{Store: newStore(t)}
	e := start(t, Settings{Policy: config.Default(), Store: st})

	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sluice", 1, "api_key="+apiKey))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 99 {
		t.Fatalf("RLS: %v %v, want 99 left", resp, err)
	}
	code, out := postJSON(t, e, `{"domain": "sluice", "descriptors": [{"entries": [{"key": "api_key", "value": "`+apiKey+`"}]}]}`)
	if code != 200 || !strings.Contains(out, `"limitRemaining":98`) {
		t.Fatalf("POST /json: %d %s, want 98 left", code, out)
	}
	code, h, _ := get(t, e.base+"/v1/auth", "X-API-Key", apiKey, "X-Real-IP", testClient)
	if code != 200 || !strings.Contains(h.Get("RateLimit"), `"per_api_key";r=97;`) {
		t.Fatalf("forward auth: %d, RateLimit %q; want per_api_key with 97 left", code, h.Get("RateLimit"))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var first string
	for _, k := range st.keys {
		if strings.Contains(k, "sk_live") {
			t.Errorf("the store was asked about %q", k)
		}
		if name, _, _ := strings.Cut(k, " "); name == "per_api_key" {
			if first == "" {
				first = k
			} else if k != first {
				t.Errorf("one API key made two keys: %q and %q", first, k)
			}
		}
	}
	if first == "" {
		t.Error("no per_api_key check reached the store")
	}
}

// A secret written in the config, a key with a limit of its own, appears
// on no surface of the service: not in the name the config leaves it to
// generate (which the metrics, the headers, the answers and the store's
// keys carry), not in the console's policy or statistics, not in the log.
func TestSecretLiteralShownNowhere(t *testing.T) {
	const vip = "sk-live-4f9a2c71e0b8d3aa"
	const yaml = `domain: api
descriptors:
  - key: api_key
    value: ` + vip + `
    secret: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    secret: true
    rate_limit: {name: per_key, unit: minute, requests_per_unit: 100}
forward_auth:
  proxy: nginx
  descriptors:
    - entries:
        - key: api_key
          from: header:X-API-Key
`
	sum := sha256.Sum256([]byte(vip))
	wantName := "api.api_key_#" + hex.EncodeToString(sum[:])[:12]

	addr := testredis.Start(t)
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	st, err := sredis.New(rc, sredis.WithCallerTime(), sredis.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := t.TempDir()
	path := writeFile(t, dir, "api.yaml", yaml)
	e := start(t, Settings{Store: st, Paths: []string{path}, ReloadInterval: -1, Logger: log})
	e.srv.admin.Sample(e.clock.Now()) // primes

	var seen []string // every surface, as read
	look := func(what, s string) {
		t.Helper()
		seen = append(seen, what+": "+s)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("api", 1, "api_key="+vip))
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("RLS: %v %v, want the VIP's limit of 2", resp, err)
	}
	look("RLS", resp.String())
	code, out := postJSON(t, e, `{"domain": "api", "descriptors": [{"entries": [{"key": "api_key", "value": "`+vip+`"}]}]}`)
	if code != 200 {
		t.Fatalf("POST /json: %d %s", code, out)
	}
	look("POST /json", out)
	code, h, body := get(t, e.base+"/v1/auth", "X-API-Key", vip, "X-Real-IP", testClient)
	if code != 429 || !strings.Contains(h.Get("RateLimit-Policy"), wantName) {
		t.Errorf("forward auth, third request: %d, RateLimit-Policy %q; want 429 under %q", code, h.Get("RateLimit-Policy"), wantName)
	}
	look("forward auth", fmt.Sprint(h)+body)
	_, _, metrics := get(t, e.base+"/metrics")
	if !strings.Contains(metrics, wantName) {
		t.Errorf("/metrics has no series of %q", wantName)
	}
	look("/metrics", metrics)

	writeFile(t, dir, "api.yaml", yaml+"# touched\n")
	if err := e.srv.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.srv.admin.Sample(e.clock.Now())
	admin := e.srv.AdminHandler(AdminOptions{UI: true, Lookup: true})
	for _, p := range []string{"/v1/policy", "/v1/stats"} {
		code, _, body := adminDo(t, admin, "GET", p, "", nil)
		if code != 200 || !strings.Contains(body, wantName) {
			t.Errorf("GET %s: %d, want the limit %q in %s", p, code, wantName, body)
		}
		look(p, body)
	}
	_, _, lookup := adminDo(t, admin, "POST", "/v1/lookup", `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"other"}]}]}`, nil)
	look("/v1/lookup", lookup)
	look("log", logs.String())

	keys, err := rc.Keys(t.Context(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis KEYS: %v %v, want the limits' keys", keys, err)
	}
	look("Redis keys", strings.Join(keys, " "))

	for _, s := range seen {
		// The value, or its longest part that no other text would hold.
		if strings.Contains(s, vip) || strings.Contains(s, vip[8:]) {
			what, _, _ := strings.Cut(s, ":")
			t.Errorf("the secret is in the %s", what)
		}
	}
}
