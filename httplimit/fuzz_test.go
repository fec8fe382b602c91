package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// FuzzMiddleware sends any request through every kind of key: it never
// panics, it answers 200, 429, 400 (no address) or 500 (a bad cost), the fields of a decided request
// parse and agree with the decision, and keys stay small.
func FuzzMiddleware(f *testing.F) {
	f.Add("10.0.0.1:1", "203.0.113.7, 10.0.0.2", "alice", "Bearer k", "/items/1", int64(1), uint16(0))
	f.Add("[::1]:2", ",,[2001:db8::1]:80,garbage", "#x|y\\", "bearer", "/", int64(0), uint16(999))
	f.Add("@", "", "", "", "/%zz", int64(-5), uint16(60000))
	rule := func(name string, algo sluice.Algo, l sluice.Limit) sluice.Rule {
		return sluice.Rule{Name: name, Algorithm: algo, Limit: l}
	}
	cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }
	h := newHarness(f,
		httplimit.WithRule(rule("ip", sluice.AlgoGCRA, sluice.Limit{Rate: 5, Period: time.Second, Burst: 10}),
			httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128"))),
		httplimit.WithRule(rule("user", sluice.AlgoSlidingLog, sluice.PerMinute(20)), httplimit.Optional(httplimit.Header("X-User"))),
		httplimit.WithRule(rule("key", sluice.AlgoFixedWindow, sluice.PerMinute(30)), httplimit.Optional(httplimit.APIKey("Authorization"))),
		httplimit.WithRule(rule("route", sluice.AlgoSlidingCounter, sluice.PerSecond(50)), httplimit.Join(httplimit.Route(), httplimit.Optional(httplimit.Header("X-User")))),
		httplimit.WithCost(cost),
		httplimit.WithLegacyHeaders(),
	)
	f.Fuzz(func(t *testing.T, remote, xff, user, auth, path string, n int64, advanceMs uint16) {
		h.clock.Advance(time.Duration(advanceMs) * time.Millisecond)
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.Path = path
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("X-User", user)
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Cost", strconv.FormatInt(n, 10))
		before := h.decisions()
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 429:
			if h.decisions() == before {
				t.Fatalf("%d without a decision", w.Code)
			}
			checks, res := h.last()
			agree(t, w, checks, res)
		case 400, 500:
		default:
			t.Fatalf("status %d", w.Code)
		}
		if k := h.store.longest(); k > 4*httplimit.MaxKeyLen+1 {
			t.Fatalf("a key of %d bytes", k)
		}
	})
}
