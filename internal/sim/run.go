package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// An Algorithm is one the replay can run: every algorithm of package
// sluice (sluice.AlgoInfos), and the leaky queue, which delays requests
// instead of denying them.
type Algorithm struct {
	ID   string // as the config spells it: "token_bucket", ..., "leaky_queue"
	Name string // as the demo prints it: "token bucket"
	// Summary says in a sentence how it decides.
	Summary string
	// Bucket reports whether Limit.Burst applies.
	Bucket bool
}

// LeakyQueue is the ID of the leaky bucket as a queue (sluice.LeakyQueue).
const LeakyQueue = "leaky_queue"

// Algorithms lists every algorithm, in the order the demo prints them:
// sluice's, then the leaky queue.
var Algorithms = algorithms()

func algorithms() []Algorithm {
	var as []Algorithm
	for _, info := range sluice.AlgoInfos() {
		as = append(as, Algorithm{ID: string(info.ID), Name: info.Name, Summary: info.Summary, Bucket: info.Bucket})
	}
	return append(as, Algorithm{ID: LeakyQueue, Name: "leaky queue", Bucket: true,
		Summary: "The leaky bucket as a queue of Burst units: requests leave Period/Rate apart, and only those past the queue's size are denied."})
}

// FindAlgorithm returns the algorithm whose ID is id.
func FindAlgorithm(id string) (Algorithm, bool) {
	for _, a := range Algorithms {
		if a.ID == id {
			return a, true
		}
	}
	return Algorithm{}, false
}

// queueStateBytes is about what a leaky queue holds: a few words.
const queueStateBytes = 64

// StateBytes is about how much memory a limiter of a under l holds
// (sluice.AlgoInfo.StateBytes): the sliding log allocates a cell per unit
// of the rate, at once; the others a few words.
func StateBytes(a Algorithm, l sluice.Limit) int64 {
	if info, ok := sluice.Algo(a.ID).Info(); ok {
		return info.StateBytes(l)
	}
	return queueStateBytes
}

// Result is how one algorithm met a list of arrivals.
type Result struct {
	Algorithm
	Allowed []bool // one per arrival: allowed (queued, for the leaky queue)
	// Retry is the RetryAfter of the first denial; 0 if none was denied.
	Retry time.Duration
	// Delays are the leaky queue's: how long each request it admitted
	// waits before it leaves the queue, in order.
	Delays []time.Duration
	// Passed counts the requests allowed.
	Passed int64
	// Gauge says what State measures, and State is what the limiter held
	// over the replay: at each arrival time before its requests, after
	// each request, and at each of Trace's sample times, in time order
	// (cut, with samples, as Trace says).
	Gauge Gauge
	State []Point
}

// Denied counts the requests denied.
func (r *Result) Denied() int64 { return int64(len(r.Allowed)) - r.Passed }

// LastDelay is the leaky queue's longest wait: the last admitted request's.
func (r *Result) LastDelay() time.Duration {
	if len(r.Delays) == 0 {
		return 0
	}
	return r.Delays[len(r.Delays)-1]
}

func (r *Result) add(d sluice.Decision) {
	if !d.Allowed && r.Denied() == 0 {
		r.Retry = d.RetryAfter
	}
	r.Allowed = append(r.Allowed, d.Allowed)
	if d.Allowed {
		r.Passed++
	}
}

// checkEvery is how many arrivals Run replays between looks at its
// context.
const checkEvery = 4096

// Run replays at, offsets from t=0 in order, through a new limiter of a
// under l, each request of cost 1, and returns what it allowed. The
// limiter is given each request's time (Start(l.Period) plus its offset)
// and never reads the clock, so the result is the same on every run. Run
// looks at ctx every few thousand arrivals, and returns its error if it
// has ended: a caller that serves replays bounds their time with it.
func Run(ctx context.Context, a Algorithm, l sluice.Limit, at []time.Duration) (*Result, error) {
	return Trace(ctx, a, l, at, nil)
}

// Trace is Run that also reads the limiter's state, with a peek of cost 0,
// at each of the offsets in samples (in order, from t=0), for a series
// that shows the state between arrivals too: a bucket refilling, a window
// starting over. A peek charges nothing, so the decisions are Run's. With
// samples, of the points from one sample to the next Result.State keeps
// only the first, the least, the greatest and the last: all that a chart
// with a column per sample draws, in memory that does not grow with the
// arrivals.
func Trace(ctx context.Context, a Algorithm, l sluice.Limit, at, samples []time.Duration) (*Result, error) {
	t0 := Start(l.Period)
	r := &Result{Algorithm: a, Allowed: make([]bool, 0, len(at)), Gauge: GaugeOf(a, l)}
	var decide func(now time.Time, n int64) sluice.Decision
	if a.ID == LeakyQueue {
		q, err := sluice.NewLeakyQueue(l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Name, err)
		}
		decide = func(now time.Time, n int64) sluice.Decision {
			release, d := q.Reserve(now, n)
			if n > 0 && d.Allowed {
				r.Delays = append(r.Delays, release.Sub(now))
			}
			return d
		}
	} else {
		lim, err := sluice.Algo(a.ID).New(l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Name, err)
		}
		decide = lim.AllowN
	}
	var run extremes
	add := func(p Point) {
		if samples == nil {
			r.State = append(r.State, p)
		} else {
			run.add(p)
		}
	}
	peek := func(off time.Duration) { add(Point{At: off, Value: r.Gauge.Value(decide(t0.Add(off), 0))}) }
	sample := func(off time.Duration) {
		r.State = run.appendTo(r.State)
		run = extremes{}
		peek(off)
	}
	s := 0
	for i, off := range at {
		if i%checkEvery == checkEvery-1 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for ; s < len(samples) && samples[s] < off; s++ {
			sample(samples[s])
		}
		if i == 0 || at[i-1] != off {
			peek(off)
		}
		d := decide(t0.Add(off), 1)
		r.add(d)
		add(Point{At: off, Value: r.Gauge.Value(d)})
	}
	for ; s < len(samples); s++ {
		sample(samples[s])
	}
	r.State = run.appendTo(r.State)
	return r, nil
}

// extremes are a run of points cut to its first, least, greatest and
// last, each the first of its value, with their places in the run.
type extremes struct {
	n   int
	pts [4]Point // first, least, greatest, last
	at  [4]int
}

func (e *extremes) add(p Point) {
	if e.n == 0 {
		e.pts = [4]Point{p, p, p, p}
	} else {
		if p.Value < e.pts[1].Value {
			e.pts[1], e.at[1] = p, e.n
		}
		if p.Value > e.pts[2].Value {
			e.pts[2], e.at[2] = p, e.n
		}
		e.pts[3], e.at[3] = p, e.n
	}
	e.n++
}

// appendTo appends the points kept to out, in their order in the run.
func (e *extremes) appendTo(out []Point) []Point {
	if e.n == 0 {
		return out
	}
	order := [4]int{0, 1, 2, 3}
	slices.SortStableFunc(order[:], func(i, j int) int { return cmp.Compare(e.at[i], e.at[j]) })
	last := -1
	for _, k := range order {
		if e.at[k] != last {
			out = append(out, e.pts[k])
			last = e.at[k]
		}
	}
	return out
}

// Thin returns the points of ps (in time order) cut, in each bin of
// width bin from t=0, to the bin's first, least, greatest and last, in
// their order: as Trace cuts its state between samples.
func Thin(ps []Point, bin time.Duration) []Point {
	var out []Point
	var run extremes
	for i, p := range ps {
		if i > 0 && p.At/bin != ps[i-1].At/bin {
			out = run.appendTo(out)
			run = extremes{}
		}
		run.add(p)
	}
	return run.appendTo(out)
}

// RetryString is the demo's "retry after" column: "-" when nothing was
// denied, "never" for a request that can never pass.
func (r *Result) RetryString() string {
	switch {
	case r.Denied() == 0:
		return "-"
	case r.Retry == sluice.Never:
		return "never"
	default:
		return FmtDur(r.Retry)
	}
}

// Timeline draws one mark per request, # allowed and . denied, and a bar
// before the first request of each new fixed window of period.
func Timeline(ok []bool, at []time.Duration, period time.Duration) string {
	var b strings.Builder
	for i, allowed := range ok {
		if i > 0 && at[i]/period != at[i-1]/period {
			b.WriteByte('|')
		}
		if allowed {
			b.WriteByte('#')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// FmtDur is Duration.String without the zero tails: 1m, not 1m0s.
func FmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
