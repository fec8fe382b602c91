package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

func usage(name string, a sluice.Algo, l sluice.Limit) *sluice.PreparedRule {
	return prep(sluice.Rule{Name: name, Algorithm: a, Limit: l, Charge: sluice.ChargeUsage})
}

// recorded is the units key holds under the window rule r: the fixed
// window's count, the counter's current count, the log's live units
// (which must add up to its count).
func (s *Store) recorded(t *testing.T, r *sluice.PreparedRule, key string) int64 {
	t.Helper()
	sp := algo.Of(r)
	h := s.hash(sp, key)
	var p probe
	p.init(h, key)
	sh := s.shard(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	ref, ok := sh.find(&p, sp)
	if !ok {
		t.Fatalf("%s/%q is not held", r.Name(), key)
	}
	w := ref.sh.wins[ref.i]
	switch sp.Kind {
	case algo.KindCounter:
		return w.b
	case algo.KindLog:
		var sum int64
		for e := range w.ring.All() {
			sum += e.N
		}
		if sum != w.a {
			t.Fatalf("%s/%q: the ring holds %d units, its count says %d", r.Name(), key, sum, w.a)
		}
	}
	return w.a
}

// TestUsageConcurrency: goroutines charging usage of one key at once are
// allowed exactly what fits, and every charge is recorded, up to the cap,
// however they interleave.
func TestUsageConcurrency(t *testing.T) {
	const (
		workers = 8
		cost    = 7
	)
	for _, a := range sluice.Algos() {
		for _, each := range []int{3, 10} { // 168 units, under the cap of 200; 560, over it
			t.Run(fmt.Sprintf("%s/%d", a, each), func(t *testing.T) {
				s := newStore(t, WithSweepInterval(0))
				r := usage("tokens", a, sluice.PerHour(100))
				c := []sluice.Check{{Rule: r, Key: "shared"}}
				var allowed sync.WaitGroup
				counts := make([]int, workers)
				for g := range workers {
					allowed.Go(func() {
						out := make([]sluice.Decision, 1)
						for range each {
							if err := s.Take(context.Background(), t0, costed(cost, c), out); err != nil {
								t.Error(err)
								return
							}
							if out[0].Allowed {
								counts[g]++
							}
						}
					})
				}
				allowed.Wait()
				total := 0
				for _, n := range counts {
					total += n
				}
				if total != 100/cost {
					t.Errorf("allowed %d charges of %d, want exactly %d", total, cost, 100/cost)
				}
				want := min(int64(workers*each*cost), 200)
				d := take(t, s, t0, 0, c...)[0]
				if d.Allowed || d.Remaining != 0 {
					t.Errorf("after %d units of 100: %+v, want denied, Remaining 0", workers*each*cost, d)
				}
				var got int64
				if sp := algo.Of(r); sp.Kind == algo.KindBucket || sp.Kind == algo.KindWide {
					got = int64(d.ResetAfter / (36 * time.Second)) // a unit drains in 36s
				} else {
					got = s.recorded(t, r, "shared")
				}
				if got != want {
					t.Errorf("recorded %d units, want %d", got, want)
				}
			})
		}
	}
}

// TestUsageNewKey: a usage charge that a new key cannot afford is
// recorded, so the key is stored; a gate rule's denial, and anything on a
// usage rule of Rate 0, leaves nothing.
func TestUsageNewKey(t *testing.T) {
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithSweepInterval(0))
			gate := prep(sluice.Rule{Name: "gate", Algorithm: a, Limit: sluice.PerHour(10)})
			use := usage("usage", a, sluice.PerHour(10))
			zero := usage("zero", a, sluice.Limit{Rate: 0, Period: time.Hour})
			for _, r := range []*sluice.PreparedRule{gate, zero} {
				if d := take(t, s, t0, 11, sluice.Check{Rule: r, Key: "k"})[0]; d.Allowed || s.Len() != 0 {
					t.Fatalf("%s: Take(t0, 11) on a new key = %+v, Len %d; want denied, nothing stored", r.Name(), d, s.Len())
				}
			}
			if d := take(t, s, t0, 11, sluice.Check{Rule: use, Key: "k"})[0]; d.Allowed || d.RetryAfter != sluice.Never || s.Len() != 1 {
				t.Fatalf("usage: Take(t0, 11) on a new key = %+v, Len %d; want denied, Never, the key stored", d, s.Len())
			}
			if d := take(t, s, t0, 0, sluice.Check{Rule: use, Key: "k"})[0]; d.Allowed {
				t.Errorf("usage: the check of cost 0 after 11 of 10 = %+v, want denied", d)
			}
		})
	}
}

// TestUsageSweep: a key in debt is not idle: the sweeper keeps it until
// its debt has drained.
func TestUsageSweep(t *testing.T) {
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithSweepInterval(0))
			r := usage("usage", a, sluice.PerSecond(3))
			now := t0.Add(123456789)
			d := take(t, s, now, 100, sluice.Check{Rule: r, Key: "k"})[0]
			if d.Allowed || s.Len() != 1 {
				t.Fatalf("Take(100 of 3) = %+v, Len %d; want denied and the key stored", d, s.Len())
			}
			if got := s.Sweep(now.Add(d.ResetAfter - 1)); got != 0 {
				t.Errorf("Sweep(now+ResetAfter-1ns) dropped %d keys, want 0: the key is in debt", got)
			}
			// (The sliding counter's last nanosecond of weight is invisible
			// in whole units.)
			if got := take(t, s, now.Add(d.ResetAfter-1), 0, sluice.Check{Rule: r, Key: "k"})[0]; got.Remaining == 3 && algo.Of(r).Kind != algo.KindCounter {
				t.Errorf("1ns before ResetAfter: %+v, want the debt not drained yet", got)
			}
			if got := s.Sweep(now.Add(d.ResetAfter)); got != 1 || s.Len() != 0 {
				t.Errorf("Sweep(now+ResetAfter) dropped %d, Len() = %d; want 1, 0", got, s.Len())
			}
		})
	}
}

// TestLogUsageRingGrows: a sliding log's ring, which starts small, grows
// for a usage charge past the rate rather than folding it into its newest
// entry, which only a full ring of Rate cells does: each entry's units
// leave the window when they should.
func TestLogUsageRingGrows(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	r := usage("log", sluice.AlgoSlidingLog, sluice.PerSecond(10))
	c := sluice.Check{Rule: r, Key: "k"}
	for i := range minLogRing {
		take(t, s, t0.Add(time.Duration(i)*time.Millisecond), 1, c)
	}
	if d := take(t, s, t0.Add(4*time.Millisecond), 11, c)[0]; d.Allowed {
		t.Fatalf("11 of 10 = %+v, want denied", d)
	}
	if got := s.recorded(t, r, "k"); got != 15 {
		t.Errorf("recorded %d units, want 15", got)
	}
	sp := algo.Of(r)
	h := s.hash(sp, "k")
	var p probe
	p.init(h, "k")
	sh := s.shard(h)
	sh.mu.RLock()
	ref, _ := sh.find(&p, sp)
	var at []time.Duration
	for e := range ref.sh.wins[ref.i].ring.All() {
		at = append(at, time.Unix(0, e.At).Sub(t0))
	}
	sh.mu.RUnlock()
	if len(at) != 5 || at[3] != 3*time.Millisecond {
		t.Errorf("the log's entries are at %v, want t0+0..4ms: the charge past the rate folded into the newest entry", at)
	}
}

// TestUsageAllocs: usage checks on existing keys allocate nothing either,
// one check or several, mixed with gate checks.
func TestUsageAllocs(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	var checks []sluice.Check
	for _, a := range sluice.Algos() {
		checks = append(checks,
			sluice.Check{Rule: usage("u", a, sluice.PerSecond(1000)), Key: "some-client-key"},
			sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: a, Limit: sluice.PerSecond(1000)}), Key: "some-client-key"})
	}
	out := make([]sluice.Decision, len(checks))
	ctx := context.Background()
	now := t0
	take(t, s, now, 1, checks...)
	costs3, costs2000 := costed(3, checks), costed(2000, checks[:8])
	for i := 0; i < len(checks); i += 2 {
		t.Run(string(checks[i].Rule.Rule().Algorithm), func(t *testing.T) {
			if a := testing.AllocsPerRun(100, func() {
				now = now.Add(time.Millisecond)
				s.Take(ctx, now, costs3[i:i+1], out)
			}); a != 0 {
				t.Errorf("Take on an existing usage key: %v allocations, want 0", a)
			}
		})
	}
	t.Run("mixed", func(t *testing.T) {
		if a := testing.AllocsPerRun(100, func() {
			now = now.Add(time.Millisecond)
			s.Take(ctx, now, costs2000, out) // denied by all: the gate checks are undone
		}); a != 0 {
			t.Errorf("Take of 8 mixed checks on existing keys: %v allocations, want 0", a)
		}
	})
}

// TestUsageSharedState: a usage rule and a gate rule of one name and
// limit share their keys' states. When the request is denied, the gate
// check that would have allowed reports the state the usage check left
// (recorded), not the state before it.
func TestUsageSharedState(t *testing.T) {
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithSweepInterval(0))
			l := sluice.PerHour(10)
			gate := prep(sluice.Rule{Name: "shared", Algorithm: a, Limit: l})
			use := usage("shared", a, l)
			spent := prep(sluice.Rule{Name: "spent", Algorithm: a, Limit: sluice.PerHour(1)})
			take(t, s, t0, 1, sluice.Check{Rule: spent, Key: "k"})
			got := take(t, s, t0, 0,
				sluice.Check{Rule: gate, Key: "k", Cost: 1},
				sluice.Check{Rule: use, Key: "k", Cost: 4},
				sluice.Check{Rule: spent, Key: "k", Cost: 1})
			if !got[0].Allowed || got[0].Remaining != 6 || !got[1].Allowed || got[2].Allowed {
				t.Fatalf("Take(gate 1, usage 4 on one state, a spent rule) = %+v; want the gate allowing with the 4 recorded (6 left), the usage allowing, the spent rule denying", got)
			}
			if d := take(t, s, t0, 0, sluice.Check{Rule: gate, Key: "k"})[0]; d.Remaining != 6 {
				t.Errorf("after the denied request: %+v, want Remaining 6: the usage recorded, the gate not charged", d)
			}
		})
	}
}

// TestUsageDebtSurvivesFlood: a key that a usage charge put in debt would
// deny, so a flood of new keys through a full store never evicts it: its
// client does not start afresh.
func TestUsageDebtSurvivesFlood(t *testing.T) {
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithShards(1), WithMaxKeys(8), WithSweepInterval(0))
			r := usage("tokens", a, sluice.PerHour(100))
			debt := sluice.Check{Rule: r, Key: "spender"}
			if d := take(t, s, t0, 150, debt)[0]; d.Allowed {
				t.Fatalf("150 of 100 = %+v, want denied", d)
			}
			out := make([]sluice.Decision, 1)
			for i := range 200 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				c := []sluice.Check{{Rule: r, Key: fmt.Sprintf("client-%03d", i)}}
				if err := s.Take(context.Background(), now, c, out); err != nil && !errors.Is(err, ErrFull) {
					t.Fatalf("new key %d: %v", i, err)
				}
			}
			if d := take(t, s, t0.Add(time.Second), 0, debt)[0]; d.Allowed || d.Remaining != 0 {
				t.Errorf("the spender after 200 new keys = %+v, want still denied, in debt", d)
			}
		})
	}
}
