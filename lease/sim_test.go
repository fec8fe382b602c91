package lease

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The simulation: N holders of one key's lease, each driven with explicit
// time (no clock, no goroutine) against a memory authority, with uneven
// demand that shifts every phase. Everything it reports is deterministic.

const (
	simRate    = 10_000
	simTick    = time.Millisecond
	simPhase   = 12 // windows per phase of demand
	simWarm    = 2  // windows left out at the start, while leases are first granted
	simSettle  = 2  // windows after a shift left out of the fairness figure
	simWindows = 5 * simPhase
	simLoss    = simPhase + 5 // the window at whose start a run's authority loses its state
)

// simFactors is each phase's total demand as a multiple of the limit.
var simFactors = [...]float64{1.2, 2.0, 0.6, 3.0, 1.2}

type simConfig struct {
	kind    Kind
	holders int
	loss    int // the window at whose start the authority's state is lost; 0: never
}

type simResult struct {
	cfg       simConfig
	limit     sluice.Limit
	ttl       time.Duration
	admitted  []int64   // per window, all holders
	by        [][]int64 // [holder][window]
	demand    [][]int64 // [holder][window]: units asked
	renewals  int64
	decisions int64
}

// simWeight is holder i's part of the demand in phase p: uneven (1 to 4,
// the heaviest asking four times the lightest), and moved round by one
// holder at each shift, so that every holder's demand changes. Shares are
// whole units per Period, so a holder whose fair part is a few units is
// off by a large fraction of it: the lightest of 64 holders asks for
// about 1/160 of the total.
func simWeight(n, i, p int) float64 {
	return float64((i+p)%n%4 + 1)
}

// simulated keeps the runs the tests share: each is deterministic.
var simulated = struct {
	sync.Mutex
	runs map[simConfig]simResult
}{runs: map[simConfig]simResult{}}

// simulateOnce is simulate, run once per configuration in a test binary.
func simulateOnce(cfg simConfig) simResult {
	simulated.Lock()
	defer simulated.Unlock()
	r, ok := simulated.runs[cfg]
	if !ok {
		r = simulate(cfg)
		simulated.runs[cfg] = r
	}
	return r
}

func simulate(cfg simConfig) simResult {
	l := sluice.PerSecond(simRate)
	renew, ttl := sluice.Lease{}.Times(l.Period)
	res := simResult{cfg: cfg, limit: l, ttl: ttl, admitted: make([]int64, simWindows)}
	var a Authority = NewMemoryAuthority()
	ctx := context.Background()
	hs := make([]*holder, cfg.holders)
	acc := make([]float64, cfg.holders)
	res.by = make([][]int64, cfg.holders)
	res.demand = make([][]int64, cfg.holders)
	for i := range hs {
		hs[i] = newHolder(cfg.kind, l, l.Rate, renew, ttl)
		res.by[i] = make([]int64, simWindows)
		res.demand[i] = make([]int64, simWindows)
	}
	t0 := time.Unix(1_700_000_000, 0).UnixNano()
	if cfg.kind == Bucket {
		// The key's bucket was drained just before: a lease on it ends
		// at t0, so that the first lease starts empty (StartTokens) and
		// the windows measure the steady state, not a full bucket's
		// burst, which an exact bucket admits too.
		_, err := a.Renew(ctx, Request{Key: "k", Holder: "drained", Kind: Bucket, Limit: l, TTL: ttl, Now: time.Unix(0, t0).Add(-ttl)})
		if err != nil {
			panic(err)
		}
	}
	ticks := int64(l.Period / simTick)
	// Holders start a part of a renewal interval apart, as processes do.
	start := func(i int) int64 { return int64(i) * int64(renew/simTick) / int64(cfg.holders) }
	var d sluice.Decision
	for w := range simWindows {
		if cfg.loss > 0 && w == cfg.loss {
			a = NewMemoryAuthority()
		}
		p := w / simPhase
		var total float64
		for i := range hs {
			total += simWeight(cfg.holders, i, p)
		}
		for k := range ticks {
			tick := int64(w)*ticks + k
			now := t0 + tick*int64(simTick)
			for i, h := range hs {
				if tick < start(i) {
					continue
				}
				if h.due(now) {
					r := h.request(now, "k", fmt.Sprint(i))
					g, err := a.Renew(ctx, r)
					if err != nil {
						panic(err)
					}
					h.apply(g, now, now)
					res.renewals++
				}
				acc[i] += simFactors[p] * simRate * simWeight(cfg.holders, i, p) / total / float64(ticks)
				for ; acc[i] >= 1; acc[i]-- {
					res.demand[i][w]++
					res.decisions++
					if !h.live(now) {
						continue
					}
					if h.decide(now, 1, &d); d.Allowed {
						res.admitted[w]++
						res.by[i][w]++
					}
				}
			}
		}
	}
	return res
}

// over10 is the least and the most admitted over 10 consecutive windows
// in which demand was at least 1.2 times the limit, as fractions of the
// limit. settled leaves out the runs that start just after a window of
// less demand: a bucket full from a quieter time passes its burst at
// once, as the exact bucket does.
func (r *simResult) over10(settled bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	heavy := func(w int) bool { return simFactors[w/simPhase] >= 1.2 }
	for w := simWarm; w+10 <= simWindows; w++ {
		ok := !settled || heavy(w-1)
		var sum int64
		for j := w; j < w+10; j++ {
			ok = ok && heavy(j)
			sum += r.admitted[j]
		}
		if ok {
			f := float64(sum) / float64(10*r.limit.Rate)
			lo, hi = min(lo, f), max(hi, f)
		}
	}
	return lo, hi
}

// lostExtra is what a run whose authority lost its state admitted above
// the same run without the loss: in all, and in its worst window.
func lostExtra(lost, base *simResult) (extra, window int64) {
	for w := range lost.admitted {
		d := lost.admitted[w] - base.admitted[w]
		extra += d
		window = max(window, d)
	}
	return max(extra, 0), window
}

// overBound is the most admitted above the bound: for the Window kind the
// sum over windows of what each admitted above Rate, and its most in one
// window; for the Bucket kind the most any run of consecutive windows
// admitted above Capacity plus Rate per window, both times.
func (r *simResult) overBound() (extra, window int64) {
	c := r.limit.Rate
	if r.cfg.kind == Window {
		for _, n := range r.admitted {
			extra += max(n-c, 0)
			window = max(window, n-c)
		}
		return extra, window
	}
	for i := range r.admitted {
		var sum int64
		for j := i; j < len(r.admitted); j++ {
			sum += r.admitted[j]
			extra = max(extra, sum-r.limit.Capacity()-int64(j-i+1)*c)
		}
		window = max(window, r.admitted[i]-r.limit.Capacity()-c)
	}
	return extra, window
}

// fairness is the worst relative gap between a holder's admitted units and
// its fair part over each phase (its windows after the first simSettle):
// its part of what was admitted in proportion to its demand, capped at
// its demand.
func (r *simResult) fairness() float64 {
	worst := 0.0
	for p := range simWindows / simPhase {
		from, to := max(p*simPhase+simSettle, simWarm), (p+1)*simPhase
		var adm, dem int64
		ai := make([]int64, len(r.by))
		di := make([]int64, len(r.by))
		for i := range r.by {
			for w := from; w < to; w++ {
				ai[i] += r.by[i][w]
				di[i] += r.demand[i][w]
			}
			adm += ai[i]
			dem += di[i]
		}
		for i := range r.by {
			fair := min(float64(di[i]), float64(adm)*float64(di[i])/float64(dem))
			worst = max(worst, math.Abs(float64(ai[i])-fair)/fair)
		}
	}
	return worst
}

// follow is the most windows a shift took until the split of what was
// admitted is within 10% of the fair split (total variation), counting
// the window of the shift.
func (r *simResult) follow() int {
	most := 0
	for p := 1; p < simWindows/simPhase; p++ {
		w := p * simPhase
		for ; w < (p+1)*simPhase; w++ {
			var adm, dem, gap float64
			for i := range r.by {
				adm += float64(r.by[i][w])
				dem += float64(r.demand[i][w])
			}
			for i := range r.by {
				fair := min(float64(r.demand[i][w]), adm*float64(r.demand[i][w])/dem)
				gap += math.Abs(float64(r.by[i][w]) - fair)
			}
			if gap <= 0.1*adm {
				break
			}
		}
		most = max(most, w-p*simPhase+1)
	}
	return most
}

func (r *simResult) opsPerDecision() float64 { return float64(r.renewals) / float64(r.decisions) }

// TestSimulation holds the leases to their targets, for N = 2, 8 and 64
// holders of a limit of 10,000 a second: admitted 98–102% of the limit
// over any 10 windows of demand at least 1.2 times it, never above the
// bound, each holder's admitted part within 10% of its fair part, and at
// N = 8 at most one renewal per 100 decisions.
func TestSimulation(t *testing.T) {
	for _, kind := range []Kind{Bucket, Window} {
		for _, n := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("%v/N=%d", kind, n), func(t *testing.T) {
				r := simulateOnce(simConfig{kind: kind, holders: n})
				// The bucket's burst saved in a quieter window passes
				// above the limit, as the exact bucket's does: the
				// bound below holds it, and BENCHMARKS.md its figure.
				if lo, hi := r.over10(kind == Bucket); lo < 0.98 || hi > 1.02 {
					t.Errorf("admitted over 10 windows: %.4f to %.4f of the limit, want 0.98 to 1.02", lo, hi)
				}
				if extra, w := r.overBound(); extra > 0 {
					t.Errorf("admitted %d above the bound (%d in one window), want none", extra, w)
				}
				if f := r.fairness(); f > 0.10 {
					t.Errorf("a holder's admitted part is %.1f%% from its fair part, want at most 10%%", 100*f)
				}
				if ops := r.opsPerDecision(); n == 8 && ops > 0.01 {
					t.Errorf("%.4f renewals per decision, want at most 0.01", ops)
				}
				t.Logf("admitted %v", r.admitted)
			})
		}
	}
}

// TestSimulationAuthorityLost: an authority that forgets its grants while
// they are live lets through at most Rate·TTL/Period more than the same
// run without the loss (the Bucket kind), and the Window kind at most one
// more Rate, in one window.
func TestSimulationAuthorityLost(t *testing.T) {
	for _, kind := range []Kind{Bucket, Window} {
		for _, n := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("%v/N=%d", kind, n), func(t *testing.T) {
				base := simulateOnce(simConfig{kind: kind, holders: n})
				lost := simulateOnce(simConfig{kind: kind, holders: n, loss: simLoss})
				extra, w := lostExtra(&lost, &base)
				bound := lost.limit.Rate * int64(lost.ttl) / int64(lost.limit.Period)
				if kind == Window {
					bound = lost.limit.Rate
				}
				if extra > bound || w > bound {
					t.Errorf("admitted %d above the run without the loss (%d in one window), want at most %d", extra, w, bound)
				}
				if over, _ := lost.overBound(); over > bound {
					t.Errorf("admitted %d above the bound, want at most %d", over, bound)
				}
				t.Logf("extra %d (%d in one window), bound %d", extra, w, bound)
			})
		}
	}
}

// BenchmarkSimulation reports the simulation's figures: the least and the
// most admitted over 10 windows of demand at least 1.2 times the limit
// (% of the limit), the most above the bound, the worst fairness gap (%),
// windows to follow a shift, renewals per 100 decisions, and what an
// authority's lost state let through above the bound (units).
func BenchmarkSimulation(b *testing.B) {
	for _, kind := range []Kind{Bucket, Window} {
		for _, n := range []int{2, 8, 64} {
			b.Run(fmt.Sprintf("%v/N=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				var r, lost simResult
				for b.Loop() {
					r = simulate(simConfig{kind: kind, holders: n})
					lost = simulate(simConfig{kind: kind, holders: n, loss: simLoss})
				}
				lo, hi := r.over10(false)
				slo, shi := r.over10(true)
				over, _ := r.overBound()
				extra, _ := lostExtra(&lost, &r)
				b.ReportMetric(100*lo, "min10_%")
				b.ReportMetric(100*hi, "max10_%")
				b.ReportMetric(100*slo, "min10settled_%")
				b.ReportMetric(100*shi, "max10settled_%")
				b.ReportMetric(float64(over), "over_bound_units")
				b.ReportMetric(100*r.fairness(), "fair_gap_%")
				b.ReportMetric(float64(r.follow()), "follow_windows")
				b.ReportMetric(100*r.opsPerDecision(), "renewals/100dec")
				b.ReportMetric(float64(extra), "lost_extra_units")
			})
		}
	}
}
