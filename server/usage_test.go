package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice"
)

// An LLM token budget, as an LLM gateway keeps it: a check of cost 0 when
// a request arrives (a descriptor's hits_addend of 0), and a charge of
// the tokens the answer used when it is done (here 150 of a budget of 100
// an hour), whose answer the gateway ignores.

// usageYAML is a budget of 100 tokens an hour per API key, charged by
// usage, counted by algo.
func usageYAML(algo string) string {
	return fmt.Sprintf(`domain: llm
descriptors:
  - key: api_key
    rate_limit: {name: tokens, algorithm: %s, unit: hour, requests_per_unit: 100, charge: usage}
`, algo)
}

// transports send a request through gRPC or POST /json.
var transports = []struct {
	name string
	ask  func(t *testing.T, e *env, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse
}{
	{"grpc", func(t *testing.T, e *env, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}},
	{"json", func(t *testing.T, e *env, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		code, out := postJSON(t, e, string(body))
		resp := new(rlspb.RateLimitResponse)
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(out), resp); err != nil {
			t.Fatalf("POST /json: %d %s: %v", code, out, err)
		}
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[resp.GetOverallCode() == ok]; code != want {
			t.Errorf("POST /json: %d with %v, want %d", code, resp.GetOverallCode(), want)
		}
		return resp
	}},
}

// codeLine writes an answer as its overall code and its descriptors' codes:
// "OVER_LIMIT [OVER_LIMIT OK]".
func codeLine(resp *rlspb.RateLimitResponse) string {
	var ds []string
	for _, st := range resp.GetStatuses() {
		ds = append(ds, st.GetCode().String())
	}
	return resp.GetOverallCode().String() + " [" + strings.Join(ds, " ") + "]"
}

// checkThenCharge is the gateway's pair for API key key: a check of cost
// 0, then a charge of tokens.
func checkThenCharge(key string, tokens uint64) (check, charge *rlspb.RateLimitRequest) {
	return withHits(rlReq("llm", 0, "api_key="+key), 0, 0), withHits(rlReq("llm", 0, "api_key="+key), 0, tokens)
}

// Twenty rounds of "check 0, charge 150" on a budget of 100: the first
// charge is recorded though it goes over, and answered as over, and every
// answer after it is OVER_LIMIT, through gRPC and POST /json, in every
// algorithm. Two periods on, the key is usable again.
func TestUsageBudget(t *testing.T) {
	for _, algo := range sluice.Algos() {
		for _, tr := range transports {
			t.Run(string(algo)+"/"+tr.name, func(t *testing.T) {
				e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "llm.yaml", usageYAML(string(algo)))}})
				checkUsageBudget(t, e, tr.ask, "k1")
			})
		}
	}
}

// checkUsageBudget runs the sequence of TestUsageBudget on e, for API
// key key.
func checkUsageBudget(t *testing.T, e *env, ask func(*testing.T, *env, *rlspb.RateLimitRequest) *rlspb.RateLimitResponse, key string) {
	t.Helper()
	check, charge := checkThenCharge(key, 150)
	for round := 1; round <= 20; round++ {
		wantCheck := "OVER_LIMIT [OVER_LIMIT]"
		if round == 1 {
			wantCheck = "OK [OK]"
		}
		if got := codeLine(ask(t, e, check)); got != wantCheck {
			t.Fatalf("round %d: check: %s, want %s", round, got, wantCheck)
		}
		resp := ask(t, e, charge)
		if got := codeLine(resp); got != "OVER_LIMIT [OVER_LIMIT]" {
			t.Fatalf("round %d: charge of 150: %s, want OVER_LIMIT", round, got)
		}
		if left := resp.GetStatuses()[0].GetLimitRemaining(); left != 0 {
			t.Fatalf("round %d: charge of 150: %d left, want 0 while in debt", round, left)
		}
	}
	e.clock.Advance(2 * time.Hour)
	if got := codeLine(ask(t, e, check)); got != "OK [OK]" {
		t.Errorf("two hours on: check: %s, want OK (the debt is capped at one period's worth)", got)
	}
}

// The same on the Redis store.
func TestUsageBudgetRedis(t *testing.T) {
	st := newRedisStore(t)
	for _, algo := range sluice.Algos() {
		for _, tr := range transports {
			t.Run(string(algo)+"/"+tr.name, func(t *testing.T) {
				e := start(t, Settings{Store: st, Paths: []string{writeFile(t, t.TempDir(), "llm.yaml", usageYAML(string(algo)))}})
				// Each run its own API key: one redis-server holds them all.
				checkUsageBudget(t, e, tr.ask, t.Name())
			})
		}
	}
}

// envoyYAML is envoyproxy/ratelimit's config for an LLM gateway: no
// sluice extension, every limit a gate in the config.
const envoyYAML = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// envoyPair is the gateway's pair under envoyYAML: the check carries the
// API key at cost 0 and the user at the request's cost, 1; the charge the
// tokens and the user at cost 0.
func envoyPair(key, user string, tokens uint64) (check, charge *rlspb.RateLimitRequest) {
	check = withHits(rlReq("llm", 0, "api_key="+key, "user="+user), 0, 0)
	charge = withHits(withHits(rlReq("llm", 0, "api_key="+key, "user="+user), 0, tokens), 1, 0)
	return check, charge
}

// envoyAnswers are envoyproxy/ratelimit's answers to rounds of envoyPair
// under envoyYAML (with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, its
// default): each key's counter adds every hit, and a descriptor is over
// when its counter, the hits added, is past its limit.
func envoyAnswers(rounds int, tokens int64) []string {
	var out []string
	var used, requests int64 // the two counters
	answer := func() string {
		a, u := "OK", "OK"
		if used > 100 {
			a = "OVER_LIMIT"
		}
		if requests > 10 {
			u = "OVER_LIMIT"
		}
		overall := "OK"
		if a != "OK" || u != "OK" {
			overall = "OVER_LIMIT"
		}
		return overall + " [" + a + " " + u + "]"
	}
	for range rounds {
		requests++
		out = append(out, answer())
		used += tokens
		out = append(out, answer())
	}
	return out
}

// Under ChargePerDescriptor, envoyproxy/ratelimit's counting, every limit
// of a config without sluice's extensions counts as envoyproxy/ratelimit
// counts: every descriptor is charged, over or not, and a check of cost 0
// is over once the counter is past the limit. Twenty rounds of the
// gateway's pair give envoyproxy/ratelimit's answers, descriptor by
// descriptor.
func TestEnvoyCounting(t *testing.T) {
	want := envoyAnswers(20, 150)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "llm.yaml", envoyYAML)}, ChargePerDescriptor: true})
			checkEnvoyCounting(t, e, tr.ask, want, "1")
		})
	}
}

// checkEnvoyCounting sends the rounds of TestEnvoyCounting, for API key
// "k"+id and user "u"+id, and checks the answers against want.
func checkEnvoyCounting(t *testing.T, e *env, ask func(*testing.T, *env, *rlspb.RateLimitRequest) *rlspb.RateLimitResponse, want []string, id string) {
	t.Helper()
	check, charge := envoyPair("k"+id, "u"+id, 150)
	for i := 0; i < len(want); i += 2 {
		if got := codeLine(ask(t, e, check)); got != want[i] {
			t.Fatalf("round %d: check: %s, want %s", i/2+1, got, want[i])
		}
		if got := codeLine(ask(t, e, charge)); got != want[i+1] {
			t.Fatalf("round %d: charge: %s, want %s", i/2+1, got, want[i+1])
		}
	}
}

// The same on the Redis store.
func TestEnvoyCountingRedis(t *testing.T) {
	st := newRedisStore(t)
	want := envoyAnswers(20, 150)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := start(t, Settings{Store: st, Paths: []string{writeFile(t, t.TempDir(), "llm.yaml", envoyYAML)}, ChargePerDescriptor: true})
			checkEnvoyCounting(t, e, tr.ask, want, tr.name) // keys of its own
		})
	}
}

// A usage limit beside quota descriptors is charged once: when a quota
// descriptor is over, the rest of the request is taken again without it,
// and without the usage charges already recorded.
func TestUsageChargedOnce(t *testing.T) {
	path := writeFile(t, t.TempDir(), "q.yaml", `domain: q
descriptors:
  - key: model
    quota_mode: true
    rate_limit: {name: model, unit: minute, requests_per_unit: 1}
  - key: api_key
    rate_limit: {name: tokens, unit: hour, requests_per_unit: 100, charge: usage}
`)
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("ChargePerDescriptor=%v", each), func(t *testing.T) {
			e := start(t, Settings{Paths: []string{path}, ChargePerDescriptor: each})
			ctx := t.Context()
			ask := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
				t.Helper()
				resp, err := e.rls.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			ask(rlReq("q", 0, "model=m")) // model=m is now over
			resp := ask(withHits(rlReq("q", 0, "model=m", "model=n", "api_key=k"), 2, 10))
			if got := codeLine(resp); got != "OK [OVER_LIMIT OK OK]" {
				t.Fatalf("model=m over, model=n within, 10 tokens: %s, want OK with model=m over", got)
			}
			if got := ask(withHits(rlReq("q", 0, "api_key=k"), 0, 0)).GetStatuses()[0].GetLimitRemaining(); got != 90 {
				t.Errorf("tokens left after a charge of 10: %d, want 90 (charged once)", got)
			}
			// model=n was charged by the request taken again.
			if got := codeLine(ask(rlReq("q", 0, "model=n"))); got != "OVER_LIMIT [OVER_LIMIT]" {
				t.Errorf("model=n afterwards: %s, want OVER_LIMIT", got)
			}
		})
	}
}

// A usage limit is charged though a gate of the request denies it; the
// gate is charged only when every limit, the usage one included, allows.
func TestUsageBesideGate(t *testing.T) {
	path := writeFile(t, t.TempDir(), "mix.yaml", `domain: mix
descriptors:
  - key: api_key
    rate_limit: {name: tokens, unit: minute, requests_per_unit: 100, charge: usage}
  - key: user
    rate_limit: {name: requests, unit: hour, requests_per_unit: 2}
`)
	e := start(t, Settings{Paths: []string{path}})
	ctx := t.Context()
	ask := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// left peeks at what is left of both limits.
	left := func() (tokens, requests uint32) {
		t.Helper()
		return ask(withHits(rlReq("mix", 0, "api_key=k"), 0, 0)).GetStatuses()[0].GetLimitRemaining(),
			ask(withHits(rlReq("mix", 0, "user=u"), 0, 0)).GetStatuses()[0].GetLimitRemaining()
	}
	for i, step := range []struct {
		advance          time.Duration
		tokens           uint64
		want             string
		tokensLeft, reqs uint32
	}{
		{0, 150, "OVER_LIMIT [OVER_LIMIT OK]", 0, 2}, // recorded; the gate allows, uncharged
		{2 * time.Minute, 10, "OK [OK OK]", 90, 1},   // a new minute: the debt is gone
		{0, 10, "OK [OK OK]", 80, 0},                 //
		{0, 10, "OVER_LIMIT [OK OVER_LIMIT]", 70, 0}, // the gate denies: the tokens are charged
	} {
		e.clock.Advance(step.advance)
		if got := codeLine(ask(withHits(rlReq("mix", 0, "api_key=k", "user=u"), 0, step.tokens))); got != step.want {
			t.Errorf("request %d, %d tokens: %s, want %s", i+1, step.tokens, got, step.want)
		}
		if tokens, reqs := left(); tokens != step.tokensLeft || reqs != step.reqs {
			t.Errorf("after request %d: %d tokens and %d requests left, want %d and %d", i+1, tokens, reqs, step.tokensLeft, step.reqs)
		}
	}
}

// failingStore is a store that is down.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return errDown
}

// A usage charge the store fails to record is counted, by domain and
// rule; a check of cost 0, and a gate, are not.
func TestUsageChargeLost(t *testing.T) {
	path := writeFile(t, t.TempDir(), "mix.yaml", `domain: mix
descriptors:
  - key: api_key
    rate_limits:
      - {name: tokens, unit: hour, requests_per_unit: 100, charge: usage}
      - {name: requests, unit: minute, requests_per_unit: 2}
`)
	e := start(t, Settings{Paths: []string{path}, Store: failingStore{}})
	ctx := t.Context()
	for _, hits := range []uint64{150, 0, 7} {
		resp, err := e.rls.ShouldRateLimit(ctx, withHits(rlReq("mix", 0, "api_key=k"), 0, hits))
		if err != nil || resp.GetOverallCode() != ok {
			t.Fatalf("%d tokens on a store that is down: %v, %v; want OK, failing open", hits, resp, err)
		}
	}
	if n := counter(t, e.srv, "sluice_usage_charges_lost_total", "domain", "mix", "rule", "tokens"); n != 2 {
		t.Errorf("usage charges lost for tokens: %v, want 2", n)
	}
	if n := counter(t, e.srv, "sluice_usage_charges_lost_total", "rule", "requests"); n != 0 {
		t.Errorf("usage charges lost for the gate: %v, want 0", n)
	}
	if n := counter(t, e.srv, "sluice_store_errors_total"); n != 3 {
		t.Errorf("store errors: %v, want 3", n)
	}
}

// The admin's policy view shows how each limit is charged, as the server
// decides it: the config's charge, or count for every gate under
// ChargePerDescriptor.
func TestPolicyCharge(t *testing.T) {
	path := writeFile(t, t.TempDir(), "mix.yaml", `domain: mix
descriptors:
  - key: api_key
    rate_limits:
      - {name: tokens, unit: hour, requests_per_unit: 100, charge: usage}
      - {name: requests, unit: minute, requests_per_unit: 2}
`)
	for _, tt := range []struct {
		each bool
		want map[string]string
	}{
		{false, map[string]string{"tokens": "usage", "requests": "gate"}},
		{true, map[string]string{"tokens": "usage", "requests": "count"}},
	} {
		s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1, ChargePerDescriptor: tt.each})
		var p policyReport
		if code, _, body := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/policy", "", &p); code != http.StatusOK {
			t.Fatalf("GET /v1/policy: %d %s", code, body)
		}
		got := map[string]string{}
		for _, l := range p.Domains[0].Limits {
			got[l.Name] = l.Charge
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("ChargePerDescriptor %v: charges %v, want %v", tt.each, got, tt.want)
		}
	}
}

// A request's limit override counts as the config's limits do: under
// ChargePerDescriptor every hit, so that a check of cost 0 is over once
// the override's count is past it.
func TestEnvoyCountingOverride(t *testing.T) {
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("ChargePerDescriptor=%v", each), func(t *testing.T) {
			e := start(t, Settings{ChargePerDescriptor: each})
			ask := func(hits uint64) string {
				t.Helper()
				req := withHits(withLimit(rlReq("test", 0, "user=ola"), 0, 100, typepb.RateLimitUnit_HOUR, 0), 0, hits)
				resp, err := e.rls.ShouldRateLimit(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				return codeLine(resp)
			}
			if got := ask(150); got != "OVER_LIMIT [OVER_LIMIT]" {
				t.Errorf("150 of an override of 100: %s, want OVER_LIMIT", got)
			}
			want := "OK [OK]" // all or nothing: the 150 was not recorded
			if each {
				want = "OVER_LIMIT [OVER_LIMIT]"
			}
			if got := ask(0); got != want {
				t.Errorf("then a check: %s, want %s", got, want)
			}
		})
	}
}
