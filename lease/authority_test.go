package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestAllocate is the allocation's vectors: every authority computes the
// same grants from the same requests and holdings.
func TestAllocate(t *testing.T) {
	l := sluice.PerSecond(10_000)
	tests := []struct {
		name      string
		r         Request
		others    []Holding
		want      Grant
		allowance bool // want.Allowance is checked: a Window request
	}{
		{"rate 0", Request{Kind: Bucket, Limit: sluice.PerSecond(0), Demand: 100},
			nil, Grant{Holders: 1, Demand: 4}, false},
		{"rate 0 window keeps what was used", Request{Kind: Window, Limit: sluice.PerSecond(0), Demand: 3, Used: 2},
			nil, Grant{Allowance: 2, Holders: 1, Demand: 3}, true},
		{"one holder, no demand: half, the rest kept for a newcomer", Request{Kind: Bucket, Limit: l},
			nil, Grant{Share: 5000, Burst: 5000, Holders: 1}, false},
		{"one holder, quiet: its demand and half the rest", Request{Kind: Bucket, Limit: l, Demand: 2000},
			nil, Grant{Share: 6000, Burst: 6000, Holders: 1, Demand: 2000}, false},
		{"one holder, busier, demand that fits: all of it", Request{Kind: Bucket, Limit: l, Demand: 6000},
			nil, Grant{Share: 10_000, Burst: 10_000, Holders: 1, Demand: 6000}, false},
		{"one holder over the limit: all of it", Request{Kind: Bucket, Limit: l, Demand: 20_000},
			nil, Grant{Share: 10_000, Burst: 10_000, Holders: 1, Demand: 20_000}, false},
		{"demand over the cap counts as the cap", Request{Kind: Bucket, Limit: l, Demand: 1e12},
			nil, Grant{Share: 10_000, Burst: 10_000, Holders: 1, Demand: 40_004}, false},
		{"negative demand counts as none", Request{Kind: Bucket, Limit: l, Demand: -5},
			nil, Grant{Share: 5000, Burst: 5000, Holders: 1}, false},
		{"proportional, less what the others hold", Request{Kind: Bucket, Limit: l, Demand: 6000},
			[]Holding{{Holder: "a", Demand: 6000, Share: 8000, Burst: 8000}},
			Grant{Share: 2000, Burst: 2000, Holders: 2, Demand: 12_000}, false},
		{"the others hold it all: nothing", Request{Kind: Bucket, Limit: l, Demand: 6000},
			[]Holding{{Holder: "a", Demand: 100, Share: 10_000, Burst: 10_000}},
			Grant{Share: 0, Burst: 0, Holders: 2, Demand: 6100}, false},
		{"busier, demand that fits: demand and an equal part of the rest", Request{Kind: Bucket, Limit: l, Demand: 3000},
			[]Holding{{Holder: "a", Demand: 1000, Share: 1000}, {Holder: "b", Demand: 2000, Share: 2000}},
			Grant{Share: 4333, Burst: 4333, Holders: 3, Demand: 6000}, false},
		{"quiet: demand and an equal part of the rest, a part kept for a newcomer", Request{Kind: Bucket, Limit: l, Demand: 1000},
			[]Holding{{Holder: "a", Demand: 1000, Share: 1000}, {Holder: "b", Demand: 2000, Share: 2000}},
			Grant{Share: 2500, Burst: 2500, Holders: 3, Demand: 4000}, false},
		{"burst in proportion to the share", Request{Kind: Bucket, Limit: sluice.Limit{Rate: 10_000, Period: time.Second, Burst: 3000}, Demand: 3000},
			[]Holding{{Holder: "a", Demand: 1000, Share: 1000}, {Holder: "b", Demand: 2000, Share: 2000}},
			Grant{Share: 4333, Burst: 1299, Holders: 3, Demand: 6000}, false},
		{"floors", Request{Kind: Bucket, Limit: sluice.PerSecond(10), Demand: 7},
			[]Holding{{Holder: "a", Demand: 7, Share: 3}, {Holder: "b", Demand: 7, Share: 3}},
			Grant{Share: 3, Burst: 3, Holders: 3, Demand: 21}, false},
		{"window: allowance against the others' allowances in this window and shares in others",
			Request{Kind: Window, Limit: l, Demand: 5000, Window: 7, Used: 500},
			[]Holding{{Holder: "a", Demand: 3000, Share: 3000, Window: 7, Allowance: 6000}, {Holder: "b", Demand: 2000, Share: 2000, Window: 6, Allowance: 9999}},
			Grant{Share: 5000, Burst: 5000, Allowance: 2000, Holders: 3, Demand: 10_000}, true},
		{"window: allowance never below what was used",
			Request{Kind: Window, Limit: l, Demand: 5000, Window: 7, Used: 2500},
			[]Holding{{Holder: "a", Demand: 3000, Share: 3000, Window: 7, Allowance: 6000}, {Holder: "b", Demand: 2000, Share: 2000, Window: 6, Allowance: 9999}},
			Grant{Share: 5000, Burst: 5000, Allowance: 2500, Holders: 3, Demand: 10_000}, true},
		{"window: a later window counts the others' shares",
			Request{Kind: Window, Limit: l, Demand: 5000, Window: 8},
			[]Holding{{Holder: "a", Demand: 3000, Share: 3000, Window: 7, Allowance: 6000}, {Holder: "b", Demand: 2000, Share: 2000, Window: 6, Allowance: 9999}},
			Grant{Share: 5000, Burst: 5000, Allowance: 5000, Holders: 3, Demand: 10_000}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.Holder = "me"
			g, h := Allocate(tt.r, tt.others)
			if !tt.allowance {
				g.Allowance = 0
			}
			if g != tt.want {
				t.Errorf("Allocate(%+v, %+v) = %+v, want %+v", tt.r, tt.others, g, tt.want)
			}
			if h.Holder != "me" || h.Share != g.Share || h.Burst != g.Burst || h.Window != tt.r.Window || h.Demand != min(max(tt.r.Demand, 0), 4*max(tt.r.Limit.Rate, 0)+4) {
				t.Errorf("Allocate(%+v) kept %+v", tt.r, h)
			}
		})
	}
}

// TestAllocateNeverOver: whatever the holders ask, in whatever order they
// renew and whenever they expire, the live shares never sum past Rate, nor
// the bursts past the capacity, nor what the holders may admit in a window
// past Rate.
func TestAllocateNeverOver(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []Kind{Bucket, Window} {
		for _, l := range []sluice.Limit{sluice.PerSecond(10_000), sluice.PerSecond(7), {Rate: 100, Period: time.Second, Burst: 250}, sluice.PerSecond(1)} {
			a := NewMemoryAuthority()
			t0 := time.Unix(1_700_000_000, 0)
			holders := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			used := map[string]int64{}
			expires := map[string]time.Time{}
			window := int64(-1)
			for step := range 5000 {
				now := t0.Add(time.Duration(step) * 10 * time.Millisecond)
				w := now.UnixNano() / int64(l.Period)
				if w != window {
					window, used = w, map[string]int64{}
				}
				id := holders[rng.IntN(len(holders))]
				if !now.Before(expires[id]) {
					// Its holding expired: the authority forgot what it
					// admitted in this window, the fault the package's
					// bound names; it starts afresh.
					used[id] = 0
				}
				r := Request{Key: "k", Holder: id, Kind: kind, Limit: l, Demand: rng.Int64N(4 * (l.Rate + 1)),
					Window: w, Used: used[id], TTL: time.Duration(1+rng.IntN(30)) * 10 * time.Millisecond, Now: now}
				g, err := a.Renew(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				if g.Share < 0 || g.Burst < 0 || g.Allowance < r.Used {
					t.Fatalf("%v %v step %d: %+v for %+v", kind, l, step, g, r)
				}
				expires[id] = now.Add(r.TTL)
				// What the holder admits this window: up to its allowance.
				used[id] = r.Used + rng.Int64N(max(g.Allowance-r.Used, 0)+1)
				hs, _ := a.Holdings(t.Context(), "k")
				var shares, bursts, committed int64
				for _, h := range hs {
					shares += h.Share
					bursts += h.Burst
					if h.Window == w {
						committed += h.Allowance
					} else {
						committed += h.Share
					}
				}
				if shares > l.Rate || bursts > l.Capacity() || (kind == Window && committed > l.Rate) {
					t.Fatalf("%v %v step %d: shares %d, bursts %d, committed %d over %v: %+v", kind, l, step, shares, bursts, committed, l, hs)
				}
			}
		}
	}
}
