package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// seqModel is the memory store's multi-check semantics, spelled out on
// single-key limiters: the enforced checks in order, then the shadow ones,
// each charged in turn (a key named twice sees the first charge); if an
// enforced check denies, none of it happened, and the checks that allowed
// report a peek. Histories are replayed to try a charge without making it.
type seqModel struct {
	hist map[string][]op
}

type op struct {
	at time.Time
	n  int64
}

func id(c sluice.Check) string { return c.Rule.Name() + "/" + c.Key }

func replay(t *testing.T, r *sluice.PreparedRule, ops []op, at time.Time, n int64) sluice.Decision {
	a, err := r.Rule().Algorithm.New(r.Rule().Limit)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		a.AllowN(o.at, o.n)
	}
	return a.AllowN(at, n)
}

func (m *seqModel) take(t *testing.T, now time.Time, n int64, checks []sluice.Check) []sluice.Decision {
	tent := map[string][]op{}
	out := make([]sluice.Decision, len(checks))
	allowed := true
	for _, shadow := range []bool{false, true} {
		for i, c := range checks {
			if c.Rule.Shadow() != shadow {
				continue
			}
			k := id(c)
			ops := append(append([]op(nil), m.hist[k]...), tent[k]...)
			out[i] = replay(t, c.Rule, ops, now, n)
			tent[k] = append(tent[k], op{now, n}) // a denial replays as a denial
			allowed = allowed && (shadow || out[i].Allowed)
		}
	}
	if allowed {
		for k, ops := range tent {
			m.hist[k] = append(m.hist[k], ops...)
		}
		return out
	}
	for i, c := range checks {
		if out[i].Allowed {
			out[i] = replay(t, c.Rule, m.hist[id(c)], now, 0)
		}
	}
	for k := range tent {
		m.hist[k] = append(m.hist[k], op{now, 0})
	}
	return out
}

// TestMultiModel drives random multi-checks, with keys named twice and a
// shadow twin of an enforced rule sharing its state, against seqModel:
// this is where charges are undone, sliding log entries included.
func TestMultiModel(t *testing.T) {
	limits := []sluice.Limit{
		sluice.PerSecond(3),
		{Rate: 5, Period: 250 * time.Millisecond, Burst: 8},
		sluice.PerMinute(7),
	}
	seeds, steps := 12, 200
	if raceEnabled {
		seeds = 6
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 1))
			var rules []*sluice.PreparedRule
			for i := range 2 {
				a := sluice.Algos()[rnd.IntN(len(sluice.Algos()))]
				rules = append(rules, prep(sluice.Rule{Name: fmt.Sprint("r", i), Algorithm: a, Limit: limits[rnd.IntN(len(limits))]}))
			}
			twin := rules[0].Rule()
			twin.Shadow = true
			rules = append(rules, prep(twin))
			s := newStore(t, WithSweepInterval(0))
			m := &seqModel{hist: map[string][]op{}}
			now := t0.Add(time.Duration(rnd.Int64N(int64(time.Second))))
			for i := range steps {
				now = now.Add(time.Duration(rnd.Int64N(int64(300 * time.Millisecond))))
				checks := make([]sluice.Check, 1+rnd.IntN(4))
				for j := range checks {
					checks[j] = sluice.Check{Rule: rules[rnd.IntN(len(rules))], Key: []string{"a", "b"}[rnd.IntN(2)]}
				}
				n := rnd.Int64N(5) - 1
				got := take(t, s, now, n, checks...)
				want := m.take(t, now, n, checks)
				for j := range checks {
					if got[j] != want[j] {
						t.Fatalf("step %d: Take(t0+%v, %d, %v): check %d = %+v, want %+v", i, now.Sub(t0), n, names(checks), j, got[j], want[j])
					}
				}
			}
		})
	}
}

func names(checks []sluice.Check) []string {
	var ns []string
	for _, c := range checks {
		s := id(c)
		if c.Rule.Shadow() {
			s += "(shadow)"
		}
		ns = append(ns, s)
	}
	return ns
}

// TestLogRing: a sliding log key starts with a small ring and grows it as
// its live entries need, up to Rate cells, deciding as the single-key log
// throughout.
func TestLogRing(t *testing.T) {
	const rate = 200
	s := newStore(t, WithSweepInterval(0))
	r := prep(sluice.Rule{Name: "log", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerSecond(rate)})
	ref, err := sluice.NewSlidingLog(r.Rule().Limit)
	if err != nil {
		t.Fatal(err)
	}
	ringCap := func() int {
		sp := algo.Of(r)
		var p probe
		p.init(s.hash(sp, "k"), "k")
		r, _ := s.shard(p.h).find(&p, sp)
		return r.sh.wins[r.i].ring.Cap()
	}
	rnd := rand.New(rand.NewPCG(3, 3))
	now := t0
	take(t, s, now, 1, sluice.Check{Rule: r, Key: "k"})
	ref.AllowN(now, 1)
	if got := ringCap(); got != minLogRing {
		t.Errorf("ring after one request: %d cells, want %d", got, minLogRing)
	}
	for i := range 2000 {
		now = now.Add(time.Duration(rnd.Int64N(int64(8 * time.Millisecond))))
		n := rnd.Int64N(4)
		if got, want := take(t, s, now, n, sluice.Check{Rule: r, Key: "k"})[0], ref.AllowN(now, n); got != want {
			t.Fatalf("step %d: Take(t0+%v, %d) = %+v, want %+v", i, now.Sub(t0), n, got, want)
		}
		if c := ringCap(); c > rate {
			t.Fatalf("step %d: ring of %d cells, more than the rate %d", i, c, rate)
		}
	}
	if got := ringCap(); got <= minLogRing {
		t.Errorf("ring after 2000 requests near the limit: %d cells, want it grown", got)
	}
}

// TestMixedConcurrency: single checks (lock-free for the buckets) and
// policies (under the shards' exclusive locks) on the same keys at once
// are exact: at one time, every unit allowed is charged once, nothing
// over the quota, nothing to a key whose policy was denied.
func TestMixedConcurrency(t *testing.T) {
	const (
		workers = 8
		ops     = 150
		quotaA  = 300
		quotaB  = 100
	)
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithSweepInterval(0))
			ra := prep(sluice.Rule{Name: "a", Algorithm: a, Limit: sluice.PerHour(quotaA)})
			rb := prep(sluice.Rule{Name: "b", Algorithm: a, Limit: sluice.PerHour(quotaB)})
			ca, cb := sluice.Check{Rule: ra, Key: "k"}, sluice.Check{Rule: rb, Key: "k"}
			var singles, policies atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					one, both := []sluice.Check{ca}, []sluice.Check{ca, cb}
					out := make([]sluice.Decision, 2)
					for i := range ops {
						if (i+w)%2 == 0 {
							s.Take(context.Background(), t0, one, out)
							if out[0].Allowed {
								singles.Add(1)
							}
						} else {
							s.Take(context.Background(), t0, both, out)
							if out[0].Allowed && out[1].Allowed {
								policies.Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			da := take(t, s, t0, 0, ca)[0]
			db := take(t, s, t0, 0, cb)[0]
			if charged := quotaA - da.Remaining; charged != singles.Load()+policies.Load() {
				t.Errorf("a was charged %d, want %d singles + %d policies", charged, singles.Load(), policies.Load())
			}
			if charged := quotaB - db.Remaining; charged != policies.Load() {
				t.Errorf("b was charged %d, want the %d policies allowed", charged, policies.Load())
			}
			if da.Remaining != 0 {
				t.Errorf("a has %d left after %d attempts on it, want 0", da.Remaining, workers*ops)
			}
		})
	}
}

// TestChurn: many goroutines adding keys to a store far too small, single
// and multi-checks, keep it within its bound, and race-free. A new key
// may find no room (ErrNoRoom) when every key sampled denies, which the
// workers' times, each running on its own, make likelier the further one
// runs ahead of the others on a loaded machine.
func TestChurn(t *testing.T) {
	s := newStore(t, WithShards(2), WithMaxKeys(32), WithSweepInterval(0))
	rules := []*sluice.PreparedRule{
		gcra("g", sluice.PerSecond(5)),
		prep(sluice.Rule{Name: "l", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerSecond(5)}),
		prep(sluice.Rule{Name: "c", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerSecond(5)}),
	}
	var wg sync.WaitGroup
	var decided atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			out := make([]sluice.Decision, 3)
			for i := range 1000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				checks := make([]sluice.Check, 1+rnd.IntN(3))
				for j := range checks {
					checks[j] = sluice.Check{Rule: rules[rnd.IntN(len(rules))], Key: fmt.Sprint(rnd.IntN(100))}
				}
				err := s.Take(context.Background(), now, checks, out)
				if err != nil && !errors.Is(err, sluice.ErrNoRoom) {
					t.Error(err)
					return
				}
				if err == nil {
					decided.Add(1)
				}
				if i%100 == 0 {
					s.Sweep(now)
				}
			}
		}()
	}
	wg.Wait()
	if decided.Load() == 0 {
		t.Error("no request was decided")
	}
	if got := s.Len(); got > 32 {
		t.Errorf("Len() = %d, want at most 32", got)
	}
	for i := range s.shards {
		s.shards[i].check(t)
	}
	s.checkBytes(t, DefaultMaxBytes)
}

// TestPinnedOverflow: a policy of more new keys than the store may hold
// goes over the bound while it is decided, then trims back.
func TestPinnedOverflow(t *testing.T) {
	s := newStore(t, WithShards(1), WithMaxKeys(1), WithSweepInterval(0))
	r := gcra("r", sluice.PerHour(5))
	for i := range 10 {
		now := t0.Add(time.Duration(i) * time.Second)
		got := take(t, s, now, 1, sluice.Check{Rule: r, Key: fmt.Sprint("a", i)}, sluice.Check{Rule: r, Key: fmt.Sprint("b", i)})
		if !got[0].Allowed || !got[1].Allowed {
			t.Fatalf("request %d on two new keys = %+v, want both allowed", i, got)
		}
		if s.Len() != 1 {
			t.Fatalf("after request %d, Len() = %d, want 1", i, s.Len())
		}
		s.shards[0].check(t)
	}
}
