package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// postJSON sends body to /json and returns the status and body.
func postJSON(t *testing.T, e *env, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	code, _, out := do(t, req)
	return code, out
}

func TestJSON(t *testing.T) {
	e := start(t, Settings{})
	body := `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}], "hits_addend": 1}`
	for i, want := range []int{200, 200, 200, 429} {
		code, out := postJSON(t, e, body)
		if code != want {
			t.Fatalf("request %d: %d %s, want %d", i+1, code, out, want)
		}
		var resp rlspb.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("request %d: the body does not parse as a RateLimitResponse: %v\n%s", i+1, err, out)
		}
		st := resp.GetStatuses()[0]
		if wantLeft := uint32(max(2-i, 0)); st.GetLimitRemaining() != wantLeft || st.GetCurrentLimit().GetName() != "per_user" {
			t.Errorf("request %d: %v, want per_user with %d left", i+1, &resp, wantLeft)
		}
		if i == 3 && (resp.GetOverallCode() != over || !strings.Contains(out, `"OVER_LIMIT"`) || header(&resp, "Retry-After") != "50") {
			t.Errorf("request 4: %s, want OVER_LIMIT with Retry-After 50", out)
		}
	}
}

func TestJSONBadRequests(t *testing.T) {
	e := start(t, Settings{MaxBodyBytes: 1024})
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"malformed", `{"domain": "test", "descriptors": [`, 400, "malformed JSON"},
		{"not JSON", `domain=test`, 400, "malformed JSON"},
		{"unknown field", `{"domain": "test", "descriptor": []}`, 400, "malformed JSON"},
		{"empty body", ``, 400, "malformed JSON"},
		{"empty domain", `{"descriptors": [{"entries": [{"key": "user", "value": "x"}]}]}`, 400, "domain: must not be empty"},
		{"no descriptors", `{"domain": "test"}`, 400, "descriptors: must not be empty"},
		{"empty key", `{"domain": "test", "descriptors": [{"entries": [{"value": "x"}]}]}`, 400, "descriptors[0].entries[0].key: must not be empty"},
		{"huge hits", `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "x"}]}], "hits_addend": 4000000000}`, 400, "hits_addend"},
		{"oversized", `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.Repeat("x", 2000) + `"}]}]}`, 413, "larger than 1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := postJSON(t, e, tt.body)
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Errorf("%d %q, want %d saying %q", code, out, tt.code, tt.want)
			}
		})
	}
	if code, _, _ := get(t, e.base+"/json"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d, want 405", code)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "test", "rule", "per_user", "result", "within"); got != 0 {
		t.Errorf("the bad requests made %v decisions, want none", got)
	}
}

func TestHealthAndReflection(t *testing.T) {
	e := start(t, Settings{})
	e.waitReady(t)
	ctx := t.Context()
	for _, svc := range []string{"", rlsService} {
		resp, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v, %v; want SERVING", svc, resp, err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, body := get(t, e.base+path); code != 200 {
			t.Errorf("GET %s: %d %q, want 200", path, code, body)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, rlsService) || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v, want the RLS and health services", names)
	}
}

func TestMetrics(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for range 4 {
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=203.0.113.7")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "nothing=here")); err != nil {
		t.Fatal(err)
	}
	postJSON(t, e, `{"domain": "test", "descriptors": [{"entries": [{"key": "path", "value": "/free"}]}]}`)
	get(t, e.base+"/v1/auth", "X-User", "secret-user", "X-Real-IP", testClient)
	code, _, text := get(t, e.base+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{
		`sluice_decisions_total{domain="test",result="within",rule="per_user"} 4`,
		`sluice_decisions_total{domain="test",result="over",rule="per_user"} 1`,
		`sluice_decisions_total{domain="test",result="within",rule="test.path_/free"} 1`,
		`sluice_decisions_total{domain="test",result="within",rule="per_ip"} 1`,
		`sluice_decisions_total{domain="test",result="within",rule="(none)"} 1`,
		`sluice_decision_duration_seconds_count{endpoint="grpc"} 5`,
		`sluice_decision_duration_seconds_count{endpoint="json"} 1`,
		`sluice_decision_duration_seconds_count{endpoint="auth"} 1`,
		`sluice_store_errors_total 0`,
		`sluice_config_reloads_total{result="failure"} 0`,
		`sluice_config_rules 6`,
		`# TYPE sluice_decision_duration_seconds histogram`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want+"\n") && !strings.Contains(text, want+" ") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Keys and addresses are never labels.
	for _, leak := range []string{"203.0.113.7", "secret-user", "127.0.0.1"} {
		if strings.Contains(text, leak) {
			t.Errorf("/metrics holds %q", leak)
		}
	}
}

// POST /json reads each body into, and writes each answer from, a pooled
// buffer: many at once, of every size (short, grown past the buffer's
// first size, past what the pool keeps) and through protojson (an
// escape), each is decided for its own user and answered with its own
// count. Under -race a buffer shared by two requests is also a race.
func TestJSONBuffersKeptApart(t *testing.T) {
	e := start(t, Settings{})
	values := func(i int) string {
		switch i % 4 {
		case 0:
			return fmt.Sprintf("u%d", i)
		case 1:
			return fmt.Sprintf("u%d-%s", i, strings.Repeat("x", 2000))
		case 2:
			return fmt.Sprintf("u%d-%s", i, strings.Repeat("y", 20000))
		}
		return fmt.Sprintf(`\u0075%d`, i) // protojson's: "u" and i, a user of its own
	}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			body := `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"` + values(i) + `"}]}]}`
			for n, want := range []int{200, 200, 200, 429} {
				// Not postJSON: its t.Fatal must not run on this goroutine.
				r, err := http.Post(e.base+"/json", "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("user %d, request %d: %v", i, n+1, err)
					return
				}
				b, err := io.ReadAll(r.Body)
				r.Body.Close()
				code, out := r.StatusCode, string(b)
				var resp rlspb.RateLimitResponse
				if err := errors.Join(err, protojson.Unmarshal(b, &resp)); err != nil || code != want {
					t.Errorf("user %d, request %d: %d %s (%v), want %d", i, n+1, code, out, err, want)
					return
				}
				if left := resp.GetStatuses()[0].GetLimitRemaining(); left != uint32(max(2-n, 0)) {
					t.Errorf("user %d, request %d: %d left, want %d", i, n+1, left, max(2-n, 0))
				}
			}
		})
	}
	wg.Wait()
}
