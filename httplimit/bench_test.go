package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memory"
)

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared for each request, so that the benchmark measures the middleware
// and not a recorder.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

// BenchmarkMiddleware measures the cost the middleware adds to a request,
// against the bare handler: the key functions, the Limiter, the store and
// the response fields. "nopstore" is a store that allows all without
// state, to show the middleware alone; "store" is the memory store.
//
//	go test -run '^$' -bench BenchmarkMiddleware -benchmem ./httplimit
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1e9)}
	perKey := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1e9)}
	perRoute := sluice.Rule{Name: "per-route", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1e9)}
	tiny := sluice.Rule{Name: "tiny", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(1)}
	proxies := httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))
	clock := sluice.ClockFunc(func() time.Time { return t0 })

	mem := func() sluice.Store {
		s, err := memory.New(memory.WithSweepInterval(0))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	cases := []struct {
		name  string
		store sluice.Store
		opts  []httplimit.Option
		code  int
	}{
		{"bare", nil, nil, 200},
		{"1rule/nopstore", nopStore{}, []httplimit.Option{httplimit.WithRule(perIP, proxies)}, 200},
		{"1rule/store", mem(), []httplimit.Option{httplimit.WithRule(perIP, proxies)}, 200},
		{"3rules/store", mem(), []httplimit.Option{
			httplimit.WithRule(perIP, proxies),
			httplimit.WithRule(perKey, httplimit.APIKey("Authorization")),
			httplimit.WithRule(perRoute, httplimit.Route()),
		}, 200},
		{"1rule/store/legacy", mem(), []httplimit.Option{httplimit.WithRule(perIP, proxies), httplimit.WithLegacyHeaders()}, 200},
		{"1rule/store/denied", mem(), []httplimit.Option{httplimit.WithRule(tiny, proxies)}, 429},
		// A WithUsage rule checked on the way in; the handler reports no
		// usage, so the cost is the check and the context it carries.
		{"usage/store", mem(), []httplimit.Option{httplimit.WithUsage(perKey, httplimit.APIKey("Authorization"))}, 200},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h := http.Handler(ok)
			if c.store != nil {
				lim, err := sluice.NewLimiter(c.store, sluice.WithClock(clock))
				if err != nil {
					b.Fatal(err)
				}
				m, err := httplimit.New(lim, c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				h = m.Handler(ok)
			}
			r := httptest.NewRequest("GET", "/items/1", nil)
			r.RemoteAddr = "10.0.0.1:4000"
			r.Header.Set("X-Forwarded-For", "198.51.100.7, 10.0.0.2")
			r.Header.Set("Authorization", "Bearer 0123456789abcdef0123456789abcdef")
			w := &discard{h: make(http.Header)}
			h.ServeHTTP(w, r) // spend tiny's one unit
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if w.code != c.code {
				b.Fatalf("status %d, want %d", w.code, c.code)
			}
		})
	}
}
