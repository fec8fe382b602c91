package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testredis"
)

// envoyLLM is envoyproxy/ratelimit's config of an LLM gateway: a token
// budget per API key and a request limit per user, no sluice extension.
const envoyLLM = `domain: llm
descriptors:
  - key: api_key
    rate_limit:
      unit: hour
      requests_per_unit: 100
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 10
`

// llmPair is the gateway's pair for one LLM request: a check of the API
// key's budget at cost 0 with the user's limit at the request's cost, 1;
// then a charge of the 150 tokens the answer used, the user at cost 0.
func llmPair(key, user string) (check, charge *rlspb.RateLimitRequest) {
	desc := func(k, v string, hits uint64) *ratelimitpb.RateLimitDescriptor {
		return &ratelimitpb.RateLimitDescriptor{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: k, Value: v}}, HitsAddend: wrapperspb.UInt64(hits)}
	}
	check = &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		desc("api_key", key, 0), {Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
	charge = &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("api_key", key, 150), desc("user", user, 0)}}
	return check, charge
}

// Twenty rounds of the gateway's pair to sluice serve under
// envoyproxy/ratelimit's environment and a real redis-server, through
// gRPC and POST /json. With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset,
// its default, sluice counts as envoyproxy/ratelimit does: every
// descriptor charged, over or not, and a check of cost 0 over once the
// count is past the limit, so every answer after the first charge is
// OVER_LIMIT, and the user, charged one a request, goes over at the 11th;
// these are envoyproxy/ratelimit's answers, descriptor by descriptor, as
// bench/cmd/rlscompare shows. With it true, all or nothing: a check of
// cost 0 peeks, and a charge over the budget is not recorded.
func TestEnvoyRunUsage(t *testing.T) {
	for _, tt := range []struct {
		stop string // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
		want func(round int) (check, charge string)
	}{
		{"", func(round int) (string, string) {
			user := "OK"
			if round > 10 {
				user = "OVER_LIMIT"
			}
			charge := "OVER_LIMIT [OVER_LIMIT " + user + "]"
			if round == 1 {
				return "OK [OK OK]", charge
			}
			return charge, charge
		}},
		{"true", func(round int) (string, string) {
			if round > 10 {
				return "OVER_LIMIT [OK OVER_LIMIT]", "OVER_LIMIT [OVER_LIMIT OK]"
			}
			return "OK [OK OK]", "OVER_LIMIT [OVER_LIMIT OK]"
		}},
	} {
		t.Run("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+tt.stop, func(t *testing.T) {
			root := t.TempDir()
			current := filepath.Join(root, "current")
			swapSymlink(t, writeRuntime(t, root, "v1", map[string]string{"llm.yaml": envoyLLM}), current)
			env := []string{
				"RUNTIME_ROOT=" + current, "RUNTIME_SUBDIRECTORY=ratelimit",
				"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
				"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "USE_STATSD=false",
				"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + testredis.Start(t),
			}
			if tt.stop != "" {
				env = append(env, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+tt.stop)
			}
			c := startChild(t, env)
			conn, err := grpc.NewClient(grpcAddr(c), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlspb.NewRateLimitServiceClient(conn)
			viaGRPC := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				resp, err := rls.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			viaJSON := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
				t.Helper()
				body, err := protojson.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				r, err := http.Post("http://"+httpAddr(c)+"/json", "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				defer r.Body.Close()
				b, _ := io.ReadAll(r.Body)
				resp := new(rlspb.RateLimitResponse)
				if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, resp); err != nil {
					t.Fatalf("POST /json: %d %s: %v", r.StatusCode, b, err)
				}
				if over := resp.GetOverallCode() != rlspb.RateLimitResponse_OK; over != (r.StatusCode == http.StatusTooManyRequests) {
					t.Errorf("POST /json: %d for %v", r.StatusCode, resp.GetOverallCode())
				}
				return resp
			}
			stableWindow(time.Hour, 20*time.Second)
			run := fmt.Sprintf("%d", time.Now().UnixNano()) // the hour's window may hold another run's counts
			for _, via := range []struct {
				name string
				ask  func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse
			}{{"grpc", viaGRPC}, {"json", viaJSON}} {
				check, charge := llmPair("k-"+via.name+run, "u-"+via.name+run)
				for round := 1; round <= 20; round++ {
					wantCheck, wantCharge := tt.want(round)
					if got := codeLine(via.ask(check)); got != wantCheck {
						t.Fatalf("%s round %d: check: %s, want %s", via.name, round, got, wantCheck)
					}
					if got := codeLine(via.ask(charge)); got != wantCharge {
						t.Fatalf("%s round %d: charge: %s, want %s", via.name, round, got, wantCharge)
					}
				}
			}
			c.stop(t)
		})
	}
}

// codeLine writes an answer as its overall code and its descriptors'
// codes: "OVER_LIMIT [OVER_LIMIT OK]".
func codeLine(resp *rlspb.RateLimitResponse) string {
	var ds []string
	for _, st := range resp.GetStatuses() {
		ds = append(ds, st.GetCode().String())
	}
	return resp.GetOverallCode().String() + " [" + strings.Join(ds, " ") + "]"
}
