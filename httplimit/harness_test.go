package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// harness is a middleware over a real Limiter and a store, on a fake
// clock, wrapping a handler that answers 200.
type harness struct {
	t      testing.TB
	clock  *fakeClock
	store  *testStore
	lim    *sluice.Limiter
	m      *httplimit.Middleware
	h      http.Handler
	mu     sync.Mutex
	checks []sluice.Check // of the last decision
	res    sluice.Result  // of the last decision
	seen   int            // decisions observed
	served int            // requests that reached the handler
}

func newHarness(t testing.TB, opts ...httplimit.Option) *harness {
	t.Helper()
	h := &harness{t: t, clock: newClock(t0), store: newStore(t)}
	var err error
	h.lim, err = sluice.NewLimiter(h.store, sluice.WithClock(h.clock))
	if err != nil {
		t.Fatal(err)
	}
	observe := httplimit.WithObserver(h.observe)
	h.m, err = httplimit.New(h.lim, append([]httplimit.Option{observe}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.h = h.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.served++
		h.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	return h
}

func (h *harness) observe(_ *http.Request, checks []sluice.Check, res sluice.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = slices.Clone(checks)
	res.Decisions = slices.Clone(res.Decisions)
	h.res = res
	h.seen++
}

// decisions is how many decisions were observed.
func (h *harness) decisions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

func (h *harness) last() ([]sluice.Check, sluice.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checks, h.res
}

// do sends a GET from remote ("ip:port") with the given header fields.
func (h *harness) do(remote string, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.serve(httptest.NewRequest("GET", "/items/1", nil), remote, hdr...)
}

func (h *harness) serve(r *http.Request, remote string, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

type policyField struct {
	q, w int64 // w is 0 when absent
}

type limitField struct {
	r, t int64 // t is -1 when absent
}

// rateFields parses RateLimit-Policy and RateLimit as the draft defines
// them, strictly: Lists of String Items, q and r required non-negative
// Integers, w a positive Integer, t a non-negative Integer, no parameter
// or name twice. It returns the names in order.
func rateFields(t testing.TB, h http.Header) ([]string, map[string]policyField, map[string]limitField) {
	t.Helper()
	var names []string
	pol := map[string]policyField{}
	lim := map[string]limitField{}
	parse := func(field string, each func(name string, it sfItem) error) {
		v := strings.Join(h.Values(field), ", ")
		items, err := parseSFList(v)
		if err != nil {
			t.Fatalf("%s: %q: %v", field, v, err)
		}
		seen := map[string]bool{}
		for _, it := range items {
			name, ok := it.val.(string)
			if !ok {
				t.Fatalf("%s: %q: member %v is not a String", field, v, it.val)
			}
			if seen[name] {
				t.Fatalf("%s: %q: %q twice", field, v, name)
			}
			seen[name] = true
			keys := map[string]bool{}
			for _, p := range it.params {
				if keys[p.key] {
					t.Fatalf("%s: %q: parameter %s twice", field, v, p.key)
				}
				keys[p.key] = true
			}
			if err := each(name, it); err != nil {
				t.Fatalf("%s: %q: %q: %v", field, v, name, err)
			}
		}
	}
	integer := func(it sfItem, k string, required bool, least int64) (int64, error) {
		v, ok := it.param(k)
		if !ok {
			if required {
				return 0, fmt.Errorf("no %s", k)
			}
			return -1, nil
		}
		n, ok := v.(int64)
		if !ok || n < least {
			return 0, fmt.Errorf("%s=%v is not an Integer >= %d", k, v, least)
		}
		return n, nil
	}
	parse("RateLimit-Policy", func(name string, it sfItem) error {
		q, err := integer(it, "q", true, 0)
		if err != nil {
			return err
		}
		w, err := integer(it, "w", false, 1)
		if err != nil {
			return err
		}
		names = append(names, name)
		pol[name] = policyField{q, max(w, 0)}
		return nil
	})
	parse("RateLimit", func(name string, it sfItem) error {
		r, err := integer(it, "r", true, 0)
		if err != nil {
			return err
		}
		tt, err := integer(it, "t", false, 0)
		if err != nil {
			return err
		}
		if _, ok := pol[name]; !ok {
			return errors.New("not in RateLimit-Policy")
		}
		lim[name] = limitField{r, tt}
		return nil
	})
	if h.Get("RateLimit") != "" && len(lim) != len(pol) {
		t.Fatalf("RateLimit %q and RateLimit-Policy %q name different policies", h.Get("RateLimit"), h.Get("RateLimit-Policy"))
	}
	return names, pol, lim
}

// agree checks that the fields of a response say what the decision was:
// one member per enforced check, q the rule's quota, r its Remaining, t
// its ResetAfter rounded up and, on a denial, at most Retry-After, which
// is the combined RetryAfter rounded up.
func agree(t testing.TB, w *httptest.ResponseRecorder, checks []sluice.Check, res sluice.Result) {
	t.Helper()
	h := w.Header()
	names, pol, lim := rateFields(t, h)
	var want []string
	for _, c := range checks {
		if !c.Rule.Shadow() {
			want = append(want, c.Rule.Name())
		}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("RateLimit-Policy names %q, want %q", names, want)
	}
	retry := int64(-1)
	if !res.Allowed {
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("denied, but status %d", w.Code)
		}
		if res.RetryAfter == sluice.Never {
			if v := h.Get("Retry-After"); v != "" {
				t.Fatalf("Retry-After %q for a request that can never pass", v)
			}
		} else {
			var err error
			if retry, err = strconv.ParseInt(h.Get("Retry-After"), 10, 64); err != nil {
				t.Fatalf("Retry-After %q: %v", h.Get("Retry-After"), err)
			}
			if d := time.Duration(retry) * time.Second; d < res.RetryAfter || d-time.Second >= res.RetryAfter {
				t.Fatalf("Retry-After %d for RetryAfter %v: want it rounded up", retry, res.RetryAfter)
			}
		}
	} else if v := h.Get("Retry-After"); v != "" {
		t.Fatalf("allowed with Retry-After %q", v)
	}
	for i, c := range checks {
		if c.Rule.Shadow() {
			continue
		}
		d := res.Decisions[i]
		if p := pol[c.Rule.Name()]; p.q != c.Rule.Quota() {
			t.Errorf("%s: q=%d, want the quota %d", c.Rule.Name(), p.q, c.Rule.Quota())
		}
		if res.Err != nil {
			continue
		}
		l, ok := lim[c.Rule.Name()]
		if !ok {
			t.Fatalf("%s: not in RateLimit %q", c.Rule.Name(), h.Get("RateLimit"))
		}
		if l.r != d.Remaining {
			t.Errorf("%s: r=%d, want Remaining %d", c.Rule.Name(), l.r, d.Remaining)
		}
		wantT := int64(-1) // absent: the rule never gets back to idle
		if d.ResetAfter != sluice.Never {
			wantT = int64((d.ResetAfter + time.Second - 1) / time.Second)
		}
		if retry >= 0 && (wantT < 0 || wantT > retry) {
			wantT = retry
		}
		if l.t != wantT {
			t.Errorf("%s: t=%d, want %d (ResetAfter %v, Retry-After %d)", c.Rule.Name(), l.t, wantT, d.ResetAfter, retry)
		}
	}
	if res.Err != nil && h.Get("RateLimit") != "" {
		t.Errorf("RateLimit %q after a store failure", h.Get("RateLimit"))
	}
}

// send does a request and checks that its fields agree with the decision.
func (h *harness) send(remote string, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	w := h.do(remote, hdr...)
	checks, res := h.last()
	agree(h.t, w, checks, res)
	return w
}

// rateHeaders names the rate-limit fields in h.
func rateHeaders(h http.Header) []string {
	var f []string
	for k := range h {
		if strings.Contains(strings.ToLower(k), "ratelimit") || k == "Retry-After" {
			f = append(f, k)
		}
	}
	return f
}

func keysOf(s *testStore) []string {
	var ks []string
	for k := range s.seen() {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
