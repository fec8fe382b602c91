package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// keyLog is a store that records the keys it is asked about.
type keyLog struct {
	sluice.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) Take(ctx context.Context, now time.Time, cost int64, checks []sluice.Check, out []sluice.Decision) error {
	k.mu.Lock()
	for _, c := range checks {
		k.keys = append(k.keys, c.Rule.Name+" "+c.Key)
	}
	k.mu.Unlock()
	return k.Store.Take(ctx, now, cost, checks, out)
}

// An API key never reaches the store, however it arrives (RLS, POST /json
// or forward auth), and it is one key, one count, on every path.
func TestSecretKeyedByDigest(t *testing.T) {
	const apiKey = "sk_live_51HqLyjWDarjtT1zdp7dc"
	st := &keyLog{Store: newStore(t)}
	e := start(t, Config{Policy: config.Default(), Store: st})

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
