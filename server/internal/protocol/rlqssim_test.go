package protocol

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	quotapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/rlqstest"
)

// The simulation runs RLQS in explicit time, with no gRPC and no
// latency: N clients (package rlqstest, as Envoy's filter behaves) and
// their streams' server side, on one bucket of simLimit per second, with
// uneven demand that shifts halfway (stream i weighs i+1, then N-i), 1.5
// times the limit in all. Each millisecond every client decides its
// arrivals, sends the reports due, and the server renews what is due.

const (
	simLimit  = 10000
	simWindow = time.Second // the limit's period
	simStep   = time.Millisecond
	simSpan   = 40 * time.Second
	simShift  = 20 * time.Second
)

const simYAML = `domain: sim
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 10000}
`

// countingAuthority counts the renewals, the operations the replicas
// share.
type countingAuthority struct {
	lease.Authority
	renewals atomic.Int64
}

func (c *countingAuthority) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	c.renewals.Add(1)
	return c.Authority.Renew(ctx, r)
}

// simResult are a run's figures.
type simResult struct {
	// minTen and maxTen are the least and most admitted over 10
	// consecutive windows (past the first two), as a fraction of the
	// limit over them; maxOne the most in one window.
	minTen, maxTen, maxOne float64
	// shareErr is the largest gap, over the steady windows before and
	// after the shift, between a stream's part of the admitted and its
	// part of the demand, relative to the latter.
	shareErr float64
	// follow is how many windows after the shift pass before a window's
	// admitted is divided as the new demand is, within 5% in total
	// variation (half the sum of the parts' gaps).
	follow int
	// renewalsPerDecision are the authority's renewals per request
	// decided.
	renewalsPerDecision float64
}

func simulate(t testing.TB, n int) simResult {
	cfg, err := config.Parse("sim.yaml", []byte(simYAML))
	if err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{Config: cfg}
	for _, r := range cfg.Rules() {
		p, err := r.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		snap.Rules = append(snap.Rules, &decide.Limit{Rule: p, Declared: r})
	}
	auth := &countingAuthority{Authority: lease.NewMemoryAuthority()}
	a := New(Service{
		Current: func() *Snapshot { return snap },
		Log:     slog.New(slog.DiscardHandler),
		RLQS: RLQSSettings{Authority: auth, AbandonAfter: time.Hour, MaxStreams: n, MaxBuckets: 1, MaxTotalBuckets: n,
			Count: func(string) {}},
	})
	api := map[string]string{"name": "api"}
	settings := &quotapb.RateLimitQuotaBucketSettings{ReportingInterval: durationpb.New(100 * time.Millisecond)}
	type sim struct {
		c       *rlqstest.Client
		s       *rlqsStream
		next    time.Time
		carry   float64
		weights [2]float64
	}
	sims := make([]*sim, n)
	var sums [2]float64
	for i := range sims {
		sims[i] = &sim{
			c:       rlqstest.New(rlqstest.Config{Domain: "sim", Bucket: func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) { return api, settings }}),
			s:       newRLQSStream(a, &a.svc.RLQS),
			weights: [2]float64{float64(i + 1), float64(n - i)},
		}
		if err := a.rlqs.join(sims[i].s, n, 0); err != nil {
			t.Fatal(err)
		}
		sums[0] += sims[i].weights[0]
		sums[1] += sims[i].weights[1]
	}
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	windows := int(simSpan / simWindow)
	admitted := make([][]float64, windows) // by window, by stream
	for w := range admitted {
		admitted[w] = make([]float64, n)
	}
	decisions := 0
	for step := time.Duration(0); step < simSpan; step += simStep {
		now := t0.Add(step)
		phase := 0
		if step >= simShift {
			phase = 1
		}
		w := int(step / simWindow)
		for i, sm := range sims {
			sm.carry += 1.5 * simLimit * sm.weights[phase] / sums[phase] * simStep.Seconds()
			for ; sm.carry >= 1; sm.carry-- {
				decisions++
				if sm.c.Allow(api, now) {
					admitted[w][i]++
				}
			}
			// As the stream's loop does: it wakes for a report or its
			// timer, renews what is due, and sets the timer again.
			var acts []*rlqspb.RateLimitQuotaResponse_BucketAction
			m := sm.c.Reports(now)
			if m != nil {
				m.Domain = "sim" // as Run sets it in a stream's first report
				if acts, err = sm.s.report(ctx, m, now); err != nil {
					t.Fatal(err)
				}
			}
			if m != nil || !now.Before(sm.next) {
				acts = append(acts, sm.s.due(ctx, now)...)
				sm.next = now.Add(sm.s.next(now))
			}
			if len(acts) > 0 {
				sm.c.Apply(&rlqspb.RateLimitQuotaResponse{BucketAction: acts}, now)
			}
		}
	}

	var r simResult
	r.minTen = math.Inf(1)
	total := make([]float64, windows)
	for w := range windows {
		for _, x := range admitted[w] {
			total[w] += x
		}
		if w >= 2 {
			r.maxOne = max(r.maxOne, total[w]/simLimit)
		}
	}
	for w := 2; w+10 <= windows; w++ {
		sum := 0.0
		for _, x := range total[w : w+10] {
			sum += x
		}
		r.minTen, r.maxTen = min(r.minTen, sum/(10*simLimit)), max(r.maxTen, sum/(10*simLimit))
	}
	shift := int(simShift / simWindow)
	// parts are each stream's part of the admitted over windows [from, to).
	parts := func(from, to int) []float64 {
		p, sum := make([]float64, n), 0.0
		for w := from; w < to; w++ {
			for i, x := range admitted[w] {
				p[i] += x
				sum += x
			}
		}
		for i := range p {
			p[i] /= sum
		}
		return p
	}
	// Steady: from the fifth window of each phase to its end, each
	// stream's part against its part of the demand.
	for phase, span := range [2][2]int{{5, shift}, {shift + 5, windows}} {
		for i, p := range parts(span[0], span[1]) {
			want := sims[i].weights[phase] / sums[phase]
			r.shareErr = max(r.shareErr, math.Abs(p-want)/want)
		}
	}
	// Followed: the first window after the shift whose parts are within
	// 5% of the demand's in total variation (a stream admitting a few a
	// window cannot be within 10% of its part in each).
	r.follow = windows - shift
	for w := shift; w < windows; w++ {
		tv := 0.0
		for i, p := range parts(w, w+1) {
			tv += math.Abs(p-sims[i].weights[1]/sums[1]) / 2
		}
		if tv <= 0.05 {
			r.follow = w - shift
			break
		}
	}
	r.renewalsPerDecision = float64(auth.renewals.Load()) / float64(decisions)
	return r
}

// The simulation meets the leases' targets at N = 2, 8 and 64 streams:
// 98–102% of the limit over any 10 windows at 1.5 times the demand, each
// stream's part of the admitted within 10% of its part of the demand once
// steady, and a shift followed within a few windows.
func TestRLQSSimulation(t *testing.T) {
	for _, n := range []int{2, 8, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := simulate(t, n)
			t.Logf("N=%d: 10 windows %.4f–%.4f of the limit, one window at most %.4f, shares within %.1f%%, shift followed in %d windows, %.5f renewals per decision",
				n, r.minTen, r.maxTen, r.maxOne, 100*r.shareErr, r.follow, r.renewalsPerDecision)
			if r.minTen < 0.98 || r.maxTen > 1.02 {
				t.Errorf("admitted %.4f–%.4f of the limit over 10 windows, want within 0.98–1.02", r.minTen, r.maxTen)
			}
			// The shares never sum past the limit; a new token bucket
			// starts full, two fills, which the deadband keeps rare.
			if r.maxOne > 1.01 {
				t.Errorf("admitted %.4f of the limit in one window, want at most 1.01", r.maxOne)
			}
			if r.shareErr > 0.1 {
				t.Errorf("a stream's part of the admitted is %.1f%% off its part of the demand, want within 10%%", 100*r.shareErr)
			}
			if r.follow > 3 {
				t.Errorf("the shift is followed in %d windows, want at most 3", r.follow)
			}
		})
	}
}

// BenchmarkRLQSSimulation reports the simulation's figures (see
// simulate): go test -run '^$' -bench RLQSSimulation -benchtime 1x
// ./internal/protocol/ (in the server module).
func BenchmarkRLQSSimulation(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(fmt.Sprint("streams=", n), func(b *testing.B) {
			b.ReportAllocs()
			var r simResult
			for b.Loop() {
				r = simulate(b, n)
			}
			b.ReportMetric(r.minTen, "min10/limit")
			b.ReportMetric(r.maxTen, "max10/limit")
			b.ReportMetric(r.maxOne, "max1/limit")
			b.ReportMetric(r.shareErr, "share-err")
			b.ReportMetric(float64(r.follow), "follow-windows")
			b.ReportMetric(r.renewalsPerDecision, "renewals/decision")
		})
	}
}
