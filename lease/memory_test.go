package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var t0 = time.Unix(1_700_000_000, 0)

func renew(t *testing.T, a Authority, r Request) Grant {
	t.Helper()
	g, err := a.Renew(t.Context(), r)
	if err != nil {
		t.Fatalf("Renew(%+v): %v", r, err)
	}
	return g
}

func holdings(t *testing.T, a Authority, key string) []Holding {
	t.Helper()
	hs, err := a.Holdings(t.Context(), key)
	if err != nil {
		t.Fatalf("Holdings(%q): %v", key, err)
	}
	return hs
}

// TestMemoryAuthority: a holder's share comes back when it expires or is
// released, and Holdings lists the live holders at the authority's time.
func TestMemoryAuthority(t *testing.T) {
	a := NewMemoryAuthority()
	req := func(holder string, demand int64, at time.Duration) Request {
		return Request{Key: "k", Holder: holder, Kind: Bucket, Limit: sluice.PerSecond(100), Demand: demand, TTL: 300 * time.Millisecond, Now: t0.Add(at)}
	}
	if g := renew(t, a, req("a", 100, 0)); g.Share != 100 {
		t.Fatalf("a alone, demand 100: share %d, want 100", g.Share)
	}
	if g := renew(t, a, req("b", 100, 100*time.Millisecond)); g.Share != 0 || g.Holders != 2 {
		t.Fatalf("b while a holds it all: %+v, want share 0 of 2 holders", g)
	}
	if g := renew(t, a, req("a", 100, 200*time.Millisecond)); g.Share != 50 {
		t.Fatalf("a renewing beside b: share %d, want 50", g.Share)
	}
	hs := holdings(t, a, "k")
	if len(hs) != 2 || hs[0].Holder != "a" || hs[0].Expires != t0.Add(500*time.Millisecond) || hs[1].Holder != "b" || hs[1].Share != 0 {
		t.Fatalf("Holdings = %+v", hs)
	}
	// a expires at 500ms: b's renewal at 500ms finds only itself.
	if g := renew(t, a, req("b", 100, 500*time.Millisecond)); g.Share != 100 || g.Holders != 1 {
		t.Fatalf("b after a expired: %+v, want all 100 alone", g)
	}
	renew(t, a, req("a", 100, 600*time.Millisecond))
	if err := a.Release(t.Context(), "k", "b"); err != nil {
		t.Fatal(err)
	}
	if hs := holdings(t, a, "k"); len(hs) != 1 || hs[0].Holder != "a" {
		t.Fatalf("after b's release: %+v", hs)
	}
	if g := renew(t, a, req("a", 100, 700*time.Millisecond)); g.Share != 100 {
		t.Fatalf("a after b's release: %+v, want all 100", g)
	}
	if err := a.Release(t.Context(), "none", "x"); err != nil {
		t.Errorf("Release of nothing: %v", err)
	}
	if hs := holdings(t, a, "none"); len(hs) != 0 {
		t.Errorf("Holdings of nothing: %+v", hs)
	}
}

// TestMemoryAuthorityRefuses: a renewal an authority cannot decide gets a
// clear error and changes nothing.
func TestMemoryAuthorityRefuses(t *testing.T) {
	good := Request{Key: "k", Holder: "a", Kind: Bucket, Limit: sluice.PerSecond(100), Demand: 1, TTL: time.Second, Now: t0}
	for _, c := range []struct {
		name   string
		change func(*Request)
	}{
		{"no key", func(r *Request) { r.Key = "" }},
		{"huge key", func(r *Request) { r.Key = string(make([]byte, MaxKeyBytes+1)) }},
		{"no holder", func(r *Request) { r.Holder = "" }},
		{"no kind", func(r *Request) { r.Kind = 0 }},
		{"negative demand", func(r *Request) { r.Demand = -1 }},
		{"negative used", func(r *Request) { r.Used = -1 }},
		{"no ttl", func(r *Request) { r.TTL = 0 }},
		{"no period", func(r *Request) { r.Limit.Period = 0 }},
		{"rate too large", func(r *Request) { r.Limit.Rate = sluice.MaxLeaseQuota + 1 }},
		{"burst too large", func(r *Request) { r.Limit.Burst = sluice.MaxLeaseQuota + 1 }},
	} {
		a := NewMemoryAuthority()
		r := good
		c.change(&r)
		if g, err := a.Renew(t.Context(), r); err == nil {
			t.Errorf("%s: Renew = %+v, want an error", c.name, g)
		}
		if hs := holdings(t, a, r.Key); len(hs) != 0 {
			t.Errorf("%s: a refused renewal left %+v", c.name, hs)
		}
	}
	ctx, cancel := contextCanceled(t)
	defer cancel()
	if _, err := NewMemoryAuthority().Renew(ctx, good); !errors.Is(err, ctx.Err()) {
		t.Errorf("Renew with a canceled context: %v", err)
	}
}

// TestMemoryAuthorityBounded: a key takes at most MaxHolders holders, and
// the holders that expired make room.
func TestMemoryAuthorityBounded(t *testing.T) {
	a := NewMemoryAuthority()
	r := Request{Key: "k", Kind: Bucket, Limit: sluice.PerSecond(10_000), TTL: time.Second, Now: t0}
	for i := range MaxHolders {
		r.Holder = fmt.Sprint(i)
		renew(t, a, r)
	}
	r.Holder = "one more"
	if _, err := a.Renew(t.Context(), r); !errors.Is(err, ErrAuthorityFull) {
		t.Fatalf("holder %d: %v, want ErrAuthorityFull", MaxHolders+1, err)
	}
	r.Holder = "0"
	renew(t, a, r) // a holder already there renews
	r.Holder, r.Now = "one more", t0.Add(time.Second)
	if g := renew(t, a, r); g.Holders != 1 {
		t.Fatalf("after the others expired: %+v, want one holder", g)
	}
	for i := range maxMemoryKeys - 1 {
		r.Key = fmt.Sprint("k", i)
		renew(t, a, r)
	}
	r.Key = "too many"
	if _, err := a.Renew(t.Context(), r); !errors.Is(err, ErrAuthorityFull) {
		t.Fatalf("key %d: %v, want ErrAuthorityFull", maxMemoryKeys+1, err)
	}
	r.Now = t0.Add(3 * time.Second)
	renew(t, a, r) // the others expired: swept
}

func contextCanceled(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx, cancel
}

// TestMemoryAuthorityWindowExpired: a Window holder that expires
// mid-window is still counted until that window ends, since it may have
// admitted up to its allowance there; in the next window it is forgotten.
func TestMemoryAuthorityWindowExpired(t *testing.T) {
	a := NewMemoryAuthority()
	w := t0.UnixNano() / int64(time.Second)
	req := func(holder string, at time.Duration) Request {
		now := t0.Add(at)
		return Request{Key: "k", Holder: holder, Kind: Window, Limit: sluice.PerSecond(100), Demand: 100,
			Window: now.UnixNano() / int64(time.Second), TTL: 300 * time.Millisecond, Now: now}
	}
	if g := renew(t, a, req("a", 0)); g.Allowance != 100 || w != t0.Unix() {
		t.Fatalf("a alone: %+v", g)
	}
	// a expired at 300ms, having perhaps admitted its 100.
	if g := renew(t, a, req("b", 500*time.Millisecond)); g.Allowance != 0 {
		t.Fatalf("b in the window a expired in: %+v, want no allowance", g)
	}
	if hs := holdings(t, a, "k"); len(hs) != 1 || hs[0].Holder != "b" {
		t.Fatalf("Holdings lists the live holders only: %+v", hs)
	}
	if g := renew(t, a, req("b", time.Second)); g.Allowance != 100 || g.Holders != 1 {
		t.Fatalf("b in the next window: %+v, want all 100 alone", g)
	}
}

// TestMemoryStartTokens: a holder new to a bucket key no one holds starts
// with what the key's bucket refilled since its last holding ended: all
// of its burst on a key never held or idle for a refill, none for a
// renewal or beside a live holder, and the refill since a release or an
// expiry otherwise.
func TestMemoryStartTokens(t *testing.T) {
	a := NewMemoryAuthority()
	l := sluice.Limit{Rate: 100, Period: time.Second} // refills in a second
	req := func(holder string, at time.Duration) Request {
		return Request{Key: "k", Holder: holder, Kind: Bucket, Limit: l, Demand: 100, TTL: 300 * time.Millisecond, Now: t0.Add(at)}
	}
	steps := []struct {
		holder  string
		at      time.Duration
		release bool
		tokens  int64
	}{
		{"a", 0, false, 100},                       // never held: full
		{"a", 100 * time.Millisecond, false, 0},    // a renewal
		{"b", 200 * time.Millisecond, false, 0},    // a holds it
		{"b", 250 * time.Millisecond, true, 0},     // b gives its share back
		{"a", 700 * time.Millisecond, false, 30},   // a's expired at 400ms: 300ms refilled
		{"a", 800 * time.Millisecond, true, 0},     // released at 800ms
		{"c", 850 * time.Millisecond, false, 5},    // 50ms refilled
		{"c", 1200 * time.Millisecond, true, 0},    // released at 1.2s
		{"d", 2300 * time.Millisecond, false, 100}, // a refill and more: full
	}
	for _, s := range steps {
		if s.release {
			if _, err := a.Renew(t.Context(), Request{Key: "tick", Holder: "x", Kind: Bucket, Limit: l, TTL: time.Second, Now: t0.Add(s.at)}); err != nil {
				t.Fatal(err) // the authority's time moves with its requests
			}
			if err := a.Release(t.Context(), "k", s.holder); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if g := renew(t, a, req(s.holder, s.at)); g.Tokens != s.tokens {
			t.Errorf("%s at %v: %d tokens (%+v), want %d", s.holder, s.at, g.Tokens, g, s.tokens)
		}
	}
	w := renew(t, a, Request{Key: "w", Holder: "a", Kind: Window, Limit: l, TTL: time.Second, Now: t0})
	if w.Tokens != 0 {
		t.Errorf("a window's grant: %d tokens, want none", w.Tokens)
	}
}

// TestMemoryAuthorityFullOfEndedKeys: a table full of keys whose holdings
// have all ended, kept for their refill (StartTokens), makes room for a
// new key rather than refusing it, and the new key starts with no more
// than what refilled since the latest of those ended, not a full bucket.
func TestMemoryAuthorityFullOfEndedKeys(t *testing.T) {
	a := NewMemoryAuthority()
	l := sluice.Limit{Rate: 1, Period: time.Second, Burst: 100} // refills in 100s
	for i := range maxMemoryKeys {
		renew(t, a, Request{Key: fmt.Sprint("k", i), Holder: "h", Kind: Bucket, Limit: l, TTL: 100 * time.Millisecond, Now: t0})
	}
	g, err := a.Renew(t.Context(), Request{Key: "new", Holder: "h", Kind: Bucket, Limit: l, Demand: 1, TTL: time.Second, Now: t0.Add(2 * time.Second)})
	if err != nil {
		t.Fatalf("a new key with the table full of ended keys: %v", err)
	}
	// The latest ended at 100ms: 1.9s at 1 a second.
	if g.Tokens != 1 {
		t.Errorf("the new key starts with %d tokens (burst %d), want 1: the refill since the evicted keys ended", g.Tokens, g.Burst)
	}
}
