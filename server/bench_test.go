package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// benchYAML is a limit no benchmark reaches: every request takes the
// whole allowed path.
const benchYAML = `domain: bench
descriptors:
  - key: user
    rate_limit:
      name: per_user
      algorithm: gcra
      unit: second
      requests_per_unit: 1000000000
forward_auth:
  proxy: nginx
  descriptors:
    - entries:
        - key: user
          from: header:X-User
`

func benchServer(b *testing.B) *Server {
	s, _ := newServer(b, Config{Paths: []string{writeFile(b, b.TempDir(), "bench.yaml", benchYAML)}, StoreTimeout: -1})
	return s
}

// BenchmarkShouldRateLimit decides one descriptor in process, over 1000
// users, none over the limit: the server's own cost, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	s := benchServer(b)
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = rlReq("bench", 0, "user=u"+strconv.Itoa(i))
	}
	ctx := b.Context()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuth is GET /v1/auth in process, without the network.
func BenchmarkAuth(b *testing.B) {
	h := benchServer(b).Handler()
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
		reqs[i].Header.Set("X-User", "u"+strconv.Itoa(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkJSON is POST /json in process, without the network.
func BenchmarkJSON(b *testing.B) {
	h := benchServer(b).Handler()
	bodies := make([]string, 1000)
	for i := range bodies {
		bodies[i] = `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u` + strconv.Itoa(i) + `"}]}]}`
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(bodies[i%len(bodies)])))
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}
