package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/lease"
	sredis "github.com/sluicehq/sluice/redis"
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
	s, _ := newServer(b, Settings{Paths: []string{writeFile(b, b.TempDir(), "bench.yaml", benchYAML)}})
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

// BenchmarkShouldRateLimitAuthority is BenchmarkShouldRateLimit on a
// server with a lease authority, whose rule is not leased: what the
// lease.Store in front of the store costs the rules it passes through.
func BenchmarkShouldRateLimitAuthority(b *testing.B) {
	s, _ := newServer(b, Settings{Paths: []string{writeFile(b, b.TempDir(), "bench.yaml", benchYAML)}, Authority: lease.NewMemoryAuthority()})
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

// BenchmarkShouldRateLimitParallel decides as BenchmarkShouldRateLimit
// does, from 32 goroutines, on the memory store and on a Redis store set
// up as sluice serve sets it up (a redis-server of the benchmark's own;
// go-redis with ContextTimeoutEnabled and no retries; batching; no
// Limiter timeout). cpu-µs/op is this process's CPU per decision, from
// getrusage, the callers included: the two stores' difference is what the
// Redis client path costs the service per decision. redis-server's own
// CPU is not in it.
func BenchmarkShouldRateLimitParallel(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		b.Run("store="+store, func(b *testing.B) {
			cfg := Settings{Paths: []string{writeFile(b, b.TempDir(), "bench.yaml", benchYAML)}}
			if store == "redis" {
				c := goredis.NewClient(&goredis.Options{Addr: testredis.Start(b), MaxRetries: -1, ContextTimeoutEnabled: true})
				b.Cleanup(func() { c.Close() })
				st, err := sredis.New(c)
				if err != nil {
					b.Fatal(err)
				}
				cfg.Store = st
			}
			s, _ := newServer(b, cfg)
			reqs := make([]*rlspb.RateLimitRequest, 1000)
			for i := range reqs {
				reqs[i] = rlReq("bench", 0, "user=u"+strconv.Itoa(i))
			}
			ctx := b.Context()
			var next atomic.Int64
			b.SetParallelism(16) // 32 callers on 2 CPUs
			b.ReportAllocs()
			cpu0, ok := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.ShouldRateLimit(ctx, reqs[next.Add(1)%int64(len(reqs))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if cpu1, ok1 := processCPU(); ok && ok1 {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			}
		})
	}
}
