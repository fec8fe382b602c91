package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// The demo prints one column per request, so it keeps limits small enough
// for a terminal, and periods within what its arithmetic holds exactly.
const (
	demoMaxRate   = 20
	demoMinPeriod = time.Millisecond
	demoMaxPeriod = 24 * time.Hour
)

// demoEpoch is the demo's fixed start: the replay never reads the clock, so
// its output is the same on every run. The start is moved back to a
// multiple of the period so that t=0 is a fixed-window boundary.
var demoEpoch = time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)

func demoHelp(w io.Writer) {
	fmt.Fprintf(w, `Usage: sluice demo [flags] [burst|steady|boundary ...]

Replays three scenarios, a burst, a steady stream and a fixed window's
boundary, against every algorithm with explicit times (never the clock)
and prints what each allowed and denied. With no scenario it runs all
three. Times are from t=0, which is a fixed-window boundary.

Scenarios (numbers for the default limit, 5/1s):
  burst     an idle client sends twice its allowance at once (10 at t=0)
  steady    a stream at 0.8 of the rate (20 requests, 250ms apart)
  boundary  the rate just before a fixed-window boundary and the rate again
            on it (5 at t=900ms, 5 at t=1s)

Flags:
  -limit RATE/PERIOD  the limit, e.g. 5/1s, 10/1m or 3/s (default 5/1s);
                      rate 1 to %d, period %s to %s
  -burst N            the buckets' capacity, 0 to %d; 0 means the rate
                      (default 0). Try -burst 10 with the burst scenario:
                      the buckets take 10 at once, the windows still 5.
`, demoMaxRate, fmtDur(demoMinPeriod), fmtDur(demoMaxPeriod), demoMaxRate)
}

// limitFlag is a flag.Value for RATE/PERIOD.
type limitFlag struct{ l *sluice.Limit }

func (f limitFlag) String() string {
	if f.l == nil {
		return ""
	}
	return fmt.Sprintf("%d/%s", f.l.Rate, fmtDur(f.l.Period))
}

func (f limitFlag) Set(s string) error {
	rate, period, err := parseLimit(s)
	if err != nil {
		return err
	}
	f.l.Rate, f.l.Period = rate, period
	return nil
}

// parseLimit parses RATE/PERIOD: "5/1s", "100/1m", or "3/s" for 3/1s.
func parseLimit(s string) (int64, time.Duration, error) {
	r, p, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errors.New("want RATE/PERIOD, like 5/1s")
	}
	rate, err := strconv.ParseInt(r, 10, 64)
	if err != nil || rate < 1 || rate > demoMaxRate {
		return 0, 0, fmt.Errorf("rate %q: want a whole number from 1 to %d", r, demoMaxRate)
	}
	if r, _ := utf8.DecodeRuneInString(p); unicode.IsLetter(r) {
		p = "1" + p // "s" is "1s"
	}
	period, err := time.ParseDuration(p)
	if err != nil {
		return 0, 0, fmt.Errorf("period %q: want a duration like 1s, 500ms or 1m", strings.TrimPrefix(s, r+"/"))
	}
	if period < demoMinPeriod || period > demoMaxPeriod {
		return 0, 0, fmt.Errorf("period %s: want %s to %s", fmtDur(period), fmtDur(demoMinPeriod), fmtDur(demoMaxPeriod))
	}
	return rate, period, nil
}

// burstFlag is a flag.Value for the buckets' capacity.
type burstFlag struct{ n *int64 }

func (f burstFlag) String() string {
	if f.n == nil {
		return ""
	}
	return strconv.FormatInt(*f.n, 10)
}

func (f burstFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > demoMaxRate {
		return fmt.Errorf("want a whole number from 0 to %d", demoMaxRate)
	}
	*f.n = n
	return nil
}

// fmtDur is Duration.String without the zero tails: 1m, not 1m0s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func runDemo(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c, _ := lookup("demo")
	l := sluice.PerSecond(5)
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Var(limitFlag{&l}, "limit", "")
	fs.Var(burstFlag{&l.Burst}, "burst", "")
	names, code, ok := parseFlags(c, fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(names) == 0 {
		for _, s := range scenarios {
			names = append(names, s.name)
		}
	}
	var chosen []scenario
	for _, n := range names {
		s, ok := findScenario(n)
		if !ok {
			fmt.Fprintf(stderr, "sluice demo: unknown scenario %q; want burst, steady or boundary\n", n)
			return exitUsage
		}
		chosen = append(chosen, s)
	}
	fmt.Fprintf(stdout, `Each scenario sends requests of cost 1, at times from t=0, to a new limiter
of each kind.
  timeline     one mark per request: # allowed (queued, for the leaky queue),
               . denied, | a fixed-window boundary (every %s from t=0)
  retry after  the RetryAfter of the first denial
`, fmtDur(l.Period))
	for _, s := range chosen {
		fmt.Fprintln(stdout)
		if err := replay(stdout, s, l); err != nil {
			fmt.Fprintf(stderr, "sluice demo: %v\n", err)
			return exitFail
		}
	}
	return exitOK
}

// A scenario is a list of requests of cost 1, as offsets from t=0, and what
// to say about how the algorithms met them.
type scenario struct {
	name     string
	requests func(l sluice.Limit) []time.Duration
	describe func(l sluice.Limit, at []time.Duration) string
	shows    func(l sluice.Limit, at []time.Duration, rs []result) string
}

var scenarios = []scenario{
	{
		name: "burst",
		requests: func(l sluice.Limit) []time.Duration {
			return make([]time.Duration, 2*max(l.Rate, l.Capacity()))
		},
		describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("An idle client sends %d requests at once, at t=0.", len(at))
		},
		shows: func(l sluice.Limit, at []time.Duration, rs []result) string {
			q := find(rs, "leaky queue")
			s := fmt.Sprintf("From idle, the buckets (token, leaky, GCRA) allowed %d at once, their capacity; "+
				"the windows allowed %d, their rate; the rest were denied.",
				find(rs, "token bucket").allowed(), find(rs, "sliding log").allowed())
			if q.allowed() > 1 {
				s += fmt.Sprintf(" The leaky queue admitted %d but does not pass them at once: they leave %s apart, the last after %s.",
					q.allowed(), fmtDur(l.Period/time.Duration(l.Rate)), fmtDur(q.lastDelay()))
			}
			if sc := find(rs, "sliding counter"); sc.retry != find(rs, "fixed window").retry {
				s += fmt.Sprintf(" The sliding counter's retry is %s, not %s: at t=%s its estimate still counts the whole window before it.",
					fmtDur(sc.retry), fmtDur(find(rs, "fixed window").retry), fmtDur(l.Period))
			}
			if l.Capacity() == l.Rate {
				s += " With -burst above the rate, the buckets take more at once and the windows do not."
			}
			return s
		},
	},
	{
		name: "steady",
		requests: func(l sluice.Limit) []time.Duration {
			// 0.8 of the rate: an interval of 5/4 the emission interval.
			step := 5 * l.Period / time.Duration(4*l.Rate)
			at := make([]time.Duration, 4*l.Rate)
			for i := range at {
				at[i] = time.Duration(i) * step
			}
			return at
		},
		describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("A client sends %d requests, one every %s, within the rate.", len(at), fmtDur(at[1]-at[0]))
		},
		shows: func(l sluice.Limit, at []time.Duration, rs []result) string {
			var deniers []string
			for _, r := range rs {
				if r.denied() > 0 {
					deniers = append(deniers, fmt.Sprintf("the %s denied %d", r.name, r.denied()))
				}
			}
			if len(deniers) > 0 {
				return "A stream within the rate mostly passes, but " + strings.Join(deniers, ", ") + "."
			}
			s := fmt.Sprintf("A stream within the rate passes everywhere: every limiter refills or slides on between requests, so each allowed all %d", len(at))
			if find(rs, "leaky queue").lastDelay() == 0 {
				s += " and the leaky queue delayed none"
			}
			return s + "."
		},
	},
	{
		name: "boundary",
		requests: func(l sluice.Limit) []time.Duration {
			at := make([]time.Duration, 2*l.Rate)
			for i := range at {
				at[i] = l.Period
				if int64(i) < l.Rate {
					at[i] -= l.Period / 10
				}
			}
			return at
		},
		describe: func(l sluice.Limit, at []time.Duration) string {
			return fmt.Sprintf("A client sends %s at t=%s, just before the fixed window's boundary at t=%s, and %d more on it.",
				plural(l.Rate, "request"), fmtDur(l.Period-l.Period/10), fmtDur(l.Period), l.Rate)
		},
		shows: func(l sluice.Limit, at []time.Duration, rs []result) string {
			fw, lg, sc := find(rs, "fixed window"), find(rs, "sliding log"), find(rs, "sliding counter")
			s := fmt.Sprintf("The fixed window passed %d in %s across its boundary at t=%s, %s its rate of %d per %s: its count starts over at the boundary. "+
				"The sliding log, exact, passed %d; the buckets %d; the sliding counter %d.",
				fw.allowed(), fmtDur(at[len(at)-1]-at[0]), fmtDur(l.Period), times(fw.allowed(), l.Rate), l.Rate, fmtDur(l.Period),
				lg.allowed(), find(rs, "token bucket").allowed(), sc.allowed())
			if lg.denied() > 0 && sc.denied() > 0 {
				s += fmt.Sprintf(" But the counter is an estimate: it would allow the next request %s after the boundary, the log only %s after it, when the first request leaves its window.",
					fmtDur(sc.retry), fmtDur(lg.retry))
			}
			return s
		},
	},
}

func findScenario(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// times says how a count compares with the rate: "twice", "as much as".
func times(n, rate int64) string {
	switch {
	case n == 2*rate:
		return "twice"
	case n == rate:
		return "as much as"
	default:
		return fmt.Sprintf("%.1f times", float64(n)/float64(rate))
	}
}

// algorithms are the limiters the demo compares, each new for every
// scenario. The leaky queue is apart: it delays instead of denying.
var algorithms = []struct {
	name string
	new  func(sluice.Limit) (sluice.Algorithm, error)
}{
	{"token bucket", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewTokenBucket(l) }},
	{"leaky bucket", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewLeakyBucket(l) }},
	{"GCRA", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewGCRA(l) }},
	{"fixed window", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewFixedWindow(l) }},
	{"sliding log", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewSlidingLog(l) }},
	{"sliding counter", func(l sluice.Limit) (sluice.Algorithm, error) { return sluice.NewSlidingCounter(l) }},
}

// result is how one limiter met a scenario's requests.
type result struct {
	name   string
	ok     []bool
	retry  time.Duration   // RetryAfter of the first denial
	delays []time.Duration // the leaky queue's: when each admitted request leaves
}

func (r result) allowed() int64 {
	var n int64
	for _, ok := range r.ok {
		if ok {
			n++
		}
	}
	return n
}

func (r result) denied() int64 { return int64(len(r.ok)) - r.allowed() }

func (r result) lastDelay() time.Duration {
	if len(r.delays) == 0 {
		return 0
	}
	return r.delays[len(r.delays)-1]
}

func (r *result) add(d sluice.Decision) {
	if !d.Allowed && r.denied() == 0 {
		r.retry = d.RetryAfter
	}
	r.ok = append(r.ok, d.Allowed)
}

func find(rs []result, name string) result {
	for _, r := range rs {
		if r.name == name {
			return r
		}
	}
	panic("demo: no result for " + name)
}

// replay runs scenario s under limit l and prints the table.
func replay(w io.Writer, s scenario, l sluice.Limit) error {
	// Windows are aligned to the Unix epoch (time.Truncate counts from the
	// zero time instead).
	ns := demoEpoch.UnixNano()
	t0 := time.Unix(0, ns-ns%int64(l.Period)).UTC()
	at := s.requests(l)

	var rs []result
	for _, a := range algorithms {
		lim, err := a.new(l)
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		r := result{name: a.name}
		for _, off := range at {
			r.add(lim.AllowN(t0.Add(off), 1))
		}
		rs = append(rs, r)
	}
	q, err := sluice.NewLeakyQueue(l)
	if err != nil {
		return fmt.Errorf("leaky queue: %w", err)
	}
	qr := result{name: "leaky queue"}
	for _, off := range at {
		now := t0.Add(off)
		release, d := q.Reserve(now, 1)
		qr.add(d)
		if d.Allowed {
			qr.delays = append(qr.delays, release.Sub(now))
		}
	}
	rs = append(rs, qr)

	fmt.Fprintf(w, "== %s: limit %d/%s, bucket capacity %d ==\n", s.name, l.Rate, fmtDur(l.Period), l.Capacity())
	wrap(w, s.describe(l, at))
	fmt.Fprintln(w)
	retryWidth := len("1.000000001s") // the same columns in every scenario, mostly
	for _, r := range rs {
		retryWidth = max(retryWidth, len(retryString(r)))
	}
	row := func(name, allowed, denied, retry, line string) {
		fmt.Fprintf(w, "%-15s  %7s  %6s  %-*s  %s\n", name, allowed, denied, retryWidth, retry, line)
	}
	row("algorithm", "allowed", "denied", "retry after", "timeline")
	for _, r := range rs {
		row(r.name, strconv.FormatInt(r.allowed(), 10), strconv.FormatInt(r.denied(), 10), retryString(r), timeline(r.ok, at, l.Period))
	}
	fmt.Fprintln(w)
	wrap(w, "Leaky queue release delays: "+delayList(qr.delays)+".")
	fmt.Fprintln(w)
	wrap(w, "Shows: "+s.shows(l, at, rs))
	return nil
}

func retryString(r result) string {
	switch {
	case r.denied() == 0:
		return "-"
	case r.retry == sluice.Never:
		return "never"
	default:
		return fmtDur(r.retry)
	}
}

// timeline draws one mark per request and a bar before the first request
// of each new fixed window.
func timeline(ok []bool, at []time.Duration, period time.Duration) string {
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

// delayList lists the leaky queue's release delays, compactly.
func delayList(ds []time.Duration) string {
	zero := true
	for _, d := range ds {
		zero = zero && d == 0
	}
	switch {
	case len(ds) == 0:
		return "none was admitted"
	case zero:
		return "0s each, no delay"
	}
	const show = 8
	var parts []string
	for i, d := range ds {
		if i == show && len(ds) > show+1 {
			parts = append(parts, "...", fmtDur(ds[len(ds)-1]))
			break
		}
		parts = append(parts, fmtDur(d))
	}
	return strings.Join(parts, " ")
}

// wrap writes text in lines of at most 79 columns.
func wrap(w io.Writer, text string) {
	const width = 79
	line := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && line+1+len(word) > width {
			fmt.Fprintln(w)
			line = 0
		} else if i > 0 {
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += len(word)
	}
	fmt.Fprintln(w)
}
