package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sim"
)

// Bounds of POST /v1/simulate, so that no simulation costs more than a
// fixed amount of time and memory.
const (
	// MaxSimArrivals is the most arrivals one simulation replays.
	MaxSimArrivals = 100_000
	// MaxSimAlgorithms is the most algorithms one simulation compares.
	MaxSimAlgorithms = 3
	// MaxSimStateBytes bounds the state of one simulated limiter: the
	// sliding log allocates a 16-byte cell per unit of its rate.
	MaxSimStateBytes = 4 << 20
	// maxSimSpan bounds the arrivals' times and a Poisson stream's span.
	maxSimSpan = 366 * 24 * time.Hour
	// simulateBudget bounds the time one simulation may take.
	simulateBudget = 2 * time.Second
	// simulateConcurrency is how many simulations may run at once; more
	// are answered 503.
	simulateConcurrency = 2
	// maxTimelineArrivals: past this, the table leaves out the timeline.
	maxTimelineArrivals = 400
	// MaxSimBins is the most bins the chart's series hold.
	MaxSimBins = 250
	// MaxSimStatePoints is the most points of one algorithm's state
	// series, and of the leaky queue's waits: past it, each bin keeps its
	// first, last, least and greatest, which is all a chart of MaxSimBins
	// columns can draw.
	MaxSimStatePoints = 4 * MaxSimBins
)

// simRequest is the body of POST /v1/simulate.
type simRequest struct {
	// Algorithms are one to three of the ids GET /v1/algorithms lists.
	Algorithms []string `json:"algorithms"`
	Limit      struct {
		Rate   int64  `json:"rate"`
		Period string `json:"period"` // a duration: 1s, 500ms, 1m
		Burst  int64  `json:"burst"`  // 0: the rate
	} `json:"limit"`
	Pattern struct {
		// Kind: "scenario" (Scenario: burst, steady or boundary, as sluice
		// demo has them), "poisson" (Rate a second over Duration, from
		// Seed), or "list" (Times: durations or milliseconds, separated by
		// spaces, commas or new lines; sorted before the replay).
		Kind     string  `json:"kind"`
		Scenario string  `json:"scenario,omitempty"`
		Rate     float64 `json:"rate,omitempty"`
		Duration string  `json:"duration,omitempty"`
		Seed     uint64  `json:"seed,omitempty"`
		Times    string  `json:"times,omitempty"`
	} `json:"pattern"`
}

// SimResponse is the answer: the table sluice demo prints, and the series
// the chart draws.
type SimResponse struct {
	Limit       string  `json:"limit"` // "5/1s"
	Capacity    int64   `json:"capacity"`
	PeriodMs    float64 `json:"period_ms"`
	Description string  `json:"description"`
	Arrivals    int     `json:"arrivals"`
	// Bins: the arrivals and each algorithm's answers, counted in bins of
	// BinMs from t=0; Start holds each bin's start, in milliseconds.
	BinMs   float64     `json:"bin_ms"`
	Start   []float64   `json:"start_ms"`
	Counts  []int       `json:"counts"`
	Results []simResult `json:"results"`
}

type simResult struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Allowed    int64  `json:"allowed"`
	Denied     int64  `json:"denied"`
	RetryAfter string `json:"retry_after"` // the first denial's, as sluice demo prints it
	// RetryAfterMs is RetryAfter in milliseconds; null when nothing was
	// denied, or the request can never pass.
	RetryAfterMs *float64 `json:"retry_after_ms"`
	Timeline     string   `json:"timeline,omitempty"` // as sluice demo draws it, for up to 400 arrivals
	MaxDelay     string   `json:"max_delay,omitempty"`
	MaxDelayMs   float64  `json:"max_delay_ms,omitempty"`
	BinAllowed   []int    `json:"bin_allowed"`
	BinDenied    []int    `json:"bin_denied"`
	// State is what the algorithm held over time (sim.Trace), sampled at
	// each arrival and each bin's start; Waits, for the leaky queue, each
	// admitted request's wait in the queue, at its arrival, in ms.
	State simState   `json:"state"`
	Waits *simSeries `json:"waits,omitempty"`
}

// simState is one algorithm's state series (sim.Gauge).
type simState struct {
	Label      string  `json:"label"`
	Ms         bool    `json:"ms"` // the values are milliseconds, not units
	Limit      float64 `json:"limit"`
	LimitLabel string  `json:"limit_label"`
	Caption    string  `json:"caption"`
	simSeries
}

// simSeries is a series of values at times from t=0, at most
// MaxSimStatePoints of them.
type simSeries struct {
	T []float64 `json:"t_ms"`
	V []float64 `json:"v"`
}

// serveSimulate is POST /v1/simulate: see simRequest. A request out of
// bounds is a 400 that says which bound; one that takes longer than
// simulateBudget a 503.
func (c *Console) serveSimulate(w http.ResponseWriter, r *http.Request) {
	var req simRequest
	if !readJSON(w, r, &req) {
		return
	}
	algs, l, at, desc, err := req.parse()
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case c.simSlots() <- struct{}{}:
		defer func() { <-c.simSlots() }()
	default:
		jsonError(w, http.StatusServiceUnavailable, "busy: other simulations are running; try again")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), simulateBudget)
	defer cancel()
	resp, err := simulate(ctx, algs, l, at)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			jsonError(w, http.StatusServiceUnavailable, fmt.Sprintf("the simulation took longer than %s: try fewer arrivals", simulateBudget))
			return
		}
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	resp.Description = desc
	writeJSON(w, http.StatusOK, resp)
}

// AlgoReport is one algorithm the simulator replays, as GET
// /v1/algorithms lists them: every algorithm of package sluice, from its
// registry (sluice.AlgoInfos), and the leaky queue.
type AlgoReport struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Summary string `json:"summary"`
	Bucket  bool   `json:"bucket"` // the burst applies
}

// algorithms is GET /v1/algorithms.
func algorithms() []AlgoReport {
	out := make([]AlgoReport, len(sim.Algorithms))
	for i, a := range sim.Algorithms {
		out[i] = AlgoReport{ID: a.ID, Name: a.Name, Summary: a.Summary, Bucket: a.Bucket}
	}
	return out
}

// algorithmIDs lists the simulator's algorithms for an error message:
// "token_bucket, ... or leaky_queue".
func algorithmIDs() string {
	ids := make([]string, len(sim.Algorithms))
	for i, a := range sim.Algorithms {
		ids[i] = a.ID
	}
	return strings.Join(ids[:len(ids)-1], ", ") + " or " + ids[len(ids)-1]
}

// parse checks the request against the bounds and makes the arrivals.
func (req *simRequest) parse() ([]sim.Algorithm, sluice.Limit, []time.Duration, string, error) {
	var l sluice.Limit
	switch n := len(req.Algorithms); {
	case n == 0:
		return nil, l, nil, "", errors.New("algorithms: choose at least one")
	case n > MaxSimAlgorithms:
		return nil, l, nil, "", fmt.Errorf("algorithms: %d of them; at most %d at once", n, MaxSimAlgorithms)
	}
	var algs []sim.Algorithm
	for i, id := range req.Algorithms {
		a, ok := sim.FindAlgorithm(id)
		if !ok {
			return nil, l, nil, "", fmt.Errorf("algorithms[%d]: unknown algorithm %q (want %s)", i, id, algorithmIDs())
		}
		if slices.Contains(algs, a) {
			return nil, l, nil, "", fmt.Errorf("algorithms[%d]: %s is already chosen", i, id)
		}
		algs = append(algs, a)
	}
	p, err := parseDuration(req.Limit.Period)
	if err != nil {
		return nil, l, nil, "", fmt.Errorf("limit.period: %v", err)
	}
	l = sluice.Limit{Rate: req.Limit.Rate, Period: p, Burst: req.Limit.Burst}
	if l.Rate < 1 {
		return nil, l, nil, "", fmt.Errorf("limit.rate: %d; want at least 1", l.Rate)
	}
	if err := l.Validate(); err != nil {
		return nil, l, nil, "", fmt.Errorf("limit: %v", err)
	}
	for _, a := range algs {
		if b := sim.StateBytes(a, l); b > MaxSimStateBytes {
			return nil, l, nil, "", fmt.Errorf("limit.rate: a %s of rate %d keeps %d MiB; the playground allows %d MiB (a rate of at most %d)",
				a.Name, l.Rate, b>>20, MaxSimStateBytes>>20, MaxSimStateBytes/sim.StateBytes(a, sluice.Limit{Rate: 1}))
		}
	}
	pt := &req.Pattern
	var (
		at   []time.Duration
		desc string
	)
	switch pt.Kind {
	case "scenario":
		sc, ok := sim.FindScenario(pt.Scenario)
		if !ok {
			return nil, l, nil, "", fmt.Errorf("pattern.scenario: unknown scenario %q (want burst, steady or boundary)", pt.Scenario)
		}
		if n := scenarioSize(pt.Scenario, l); n > MaxSimArrivals {
			return nil, l, nil, "", fmt.Errorf("pattern: the %s scenario at this limit makes %d arrivals; at most %d", pt.Scenario, n, MaxSimArrivals)
		}
		at = sc.Arrivals(l)
		desc = sc.Describe(l, at)
	case "poisson":
		d, err := parseDuration(pt.Duration)
		if err != nil {
			return nil, l, nil, "", fmt.Errorf("pattern.duration: %v", err)
		}
		if d > maxSimSpan {
			return nil, l, nil, "", fmt.Errorf("pattern.duration: %s; at most %s", sim.FmtDur(d), sim.FmtDur(maxSimSpan))
		}
		if at, err = sim.Poisson(pt.Rate, d, pt.Seed, MaxSimArrivals); err != nil {
			return nil, l, nil, "", fmt.Errorf("pattern: %v", err)
		}
		desc = fmt.Sprintf("A Poisson stream of %s requests a second over %s (seed %d): %d arrivals.",
			strconv.FormatFloat(pt.Rate, 'f', -1, 64), sim.FmtDur(d), pt.Seed, len(at))
	case "list":
		if at, err = parseTimes(pt.Times); err != nil {
			return nil, l, nil, "", fmt.Errorf("pattern.times: %v", err)
		}
		desc = fmt.Sprintf("%d arrivals, from t=%s to t=%s.", len(at), sim.FmtDur(at[0]), sim.FmtDur(at[len(at)-1]))
	default:
		return nil, l, nil, "", fmt.Errorf("pattern.kind: %q; want scenario, poisson or list", pt.Kind)
	}
	if len(at) == 0 {
		return nil, l, nil, "", errors.New("pattern: no arrivals")
	}
	return algs, l, at, desc, nil
}

// scenarioSize is how many arrivals a scenario makes, before it makes them.
// A limit so large that the count would overflow is counted as more than
// any bound, so that it is refused rather than made.
func scenarioSize(name string, l sluice.Limit) int64 {
	n, times := l.Rate, int64(2)
	switch name {
	case "burst":
		n = max(l.Rate, l.Capacity())
	case "steady":
		times = 4
	}
	if n > math.MaxInt64/times {
		return math.MaxInt64
	}
	return times * n
}

// parseDuration reads a positive duration: "1s", "500ms", "1m".
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 1s, 500ms or 1m", s)
	}
	return d, nil
}

// parseTimes reads arrival times: durations ("900ms", "1.5s") or plain
// numbers of milliseconds, separated by spaces, commas, semicolons or new
// lines, and sorts them.
func parseTimes(s string) ([]time.Duration, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	if len(fields) == 0 {
		return nil, errors.New("empty: paste arrival times, such as 0 900ms 1s 1.2s")
	}
	if len(fields) > MaxSimArrivals {
		return nil, fmt.Errorf("%d arrivals; at most %d", len(fields), MaxSimArrivals)
	}
	at := make([]time.Duration, len(fields))
	for i, f := range fields {
		d, err := time.ParseDuration(f)
		if err != nil {
			ms, perr := strconv.ParseFloat(f, 64)
			if perr != nil || ms != ms {
				return nil, fmt.Errorf("arrival %d, %q: want a duration such as 900ms or 1.5s, or a number of milliseconds", i+1, f)
			}
			if ms < 0 || ms > float64(maxSimSpan/time.Millisecond) {
				return nil, fmt.Errorf("arrival %d, %q: want 0 to %s", i+1, f, sim.FmtDur(maxSimSpan))
			}
			d = time.Duration(ms * float64(time.Millisecond))
		}
		if d < 0 || d > maxSimSpan {
			return nil, fmt.Errorf("arrival %d, %q: want 0 to %s", i+1, f, sim.FmtDur(maxSimSpan))
		}
		at[i] = d
	}
	slices.Sort(at)
	return at, nil
}

// simulate replays at through each algorithm and bins the answers.
func simulate(ctx context.Context, algs []sim.Algorithm, l sluice.Limit, at []time.Duration) (*SimResponse, error) {
	span := max(at[len(at)-1], l.Period)
	bin := binWidth(span)
	nb := int(span/bin) + 1
	resp := &SimResponse{Limit: fmt.Sprintf("%d/%s", l.Rate, sim.FmtDur(l.Period)), Capacity: l.Capacity(),
		PeriodMs: ms64(l.Period), Arrivals: len(at), BinMs: ms64(bin), Start: make([]float64, nb), Counts: make([]int, nb)}
	for i := range resp.Start {
		resp.Start[i] = ms64(time.Duration(i) * bin)
	}
	for _, t := range at {
		resp.Counts[t/bin]++
	}
	samples := make([]time.Duration, nb)
	for i := range samples {
		samples[i] = time.Duration(i) * bin
	}
	for _, a := range algs {
		r, err := sim.Trace(ctx, a, l, at, samples)
		if err != nil {
			return nil, err
		}
		g := r.Gauge
		sr := simResult{ID: a.ID, Name: a.Name, Allowed: r.Passed, Denied: r.Denied(), RetryAfter: r.RetryString(),
			BinAllowed: make([]int, nb), BinDenied: make([]int, nb),
			State: simState{Label: g.Label, Ms: g.Ms, Limit: g.Limit, LimitLabel: g.LimitLabel, Caption: g.Caption,
				simSeries: thin(r.State, bin)}}
		if r.Denied() > 0 && r.Retry != sluice.Never {
			v := ms64(r.Retry)
			sr.RetryAfterMs = &v
		}
		if len(at) <= maxTimelineArrivals {
			sr.Timeline = sim.Timeline(r.Allowed, at, l.Period)
		}
		if a.ID == sim.LeakyQueue {
			sr.MaxDelay = sim.FmtDur(r.LastDelay())
			sr.MaxDelayMs = ms64(r.LastDelay())
			waits := make([]sim.Point, 0, len(r.Delays))
			for i, ok := range r.Allowed {
				if ok {
					waits = append(waits, sim.Point{At: at[i], Value: ms64(r.Delays[len(waits)])})
				}
			}
			w := thin(waits, bin)
			sr.Waits = &w
		}
		for i, ok := range r.Allowed {
			if ok {
				sr.BinAllowed[at[i]/bin]++
			} else {
				sr.BinDenied[at[i]/bin]++
			}
		}
		resp.Results = append(resp.Results, sr)
	}
	return resp, ctx.Err()
}

// binWidth is the least of 1, 2 and 5 times a power of ten nanoseconds
// that cuts span into at most MaxSimBins-1 bins.
func binWidth(span time.Duration) time.Duration {
	for unit := time.Duration(1); ; unit *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if w := m * unit; span/w < MaxSimBins-1 {
				return w
			}
		}
	}
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// thin returns ps as a series, at most MaxSimStatePoints of them: past
// that, the points of each bin of width bin are cut to its first, least,
// greatest and last, in their order, so that a chart of the bins draws
// the same line.
func thin(ps []sim.Point, bin time.Duration) simSeries {
	keep := ps
	if len(ps) > MaxSimStatePoints {
		keep = sim.Thin(ps, bin)
	}
	out := simSeries{T: make([]float64, len(keep)), V: make([]float64, len(keep))}
	for i, p := range keep {
		out.T[i], out.V[i] = ms64(p.At), p.Value
	}
	return out
}
