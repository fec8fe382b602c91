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
	"github.com/sluicehq/sluice/internal/sim"
)

// The demo prints one column per request, so it keeps limits small enough
// for a terminal, and periods within what its arithmetic holds exactly.
const (
	demoMaxRate   = 20
	demoMinPeriod = time.Millisecond
	demoMaxPeriod = 24 * time.Hour
)

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

Algorithms:
`, demoMaxRate, fmtDur(demoMinPeriod), fmtDur(demoMaxPeriod), demoMaxRate)
	for _, a := range sim.Algorithms {
		hanging(w, "  ", 22, a.Name, a.Summary)
	}
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

// fmtDur is sim.FmtDur: 1m, not 1m0s.
func fmtDur(d time.Duration) string { return sim.FmtDur(d) }

func runDemo(_ context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) int {
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
			names = append(names, s.Name)
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

// A scenario is one of package sim's, and what to say about how the
// algorithms met it.
type scenario struct {
	sim.Scenario
	shows func(l sluice.Limit, at []time.Duration, rs []*sim.Result) string
}

// scenarios are sim.Scenarios, in their order, each with its moral.
var scenarios = []scenario{
	{
		Scenario: mustScenario("burst"),
		shows: func(l sluice.Limit, at []time.Duration, rs []*sim.Result) string {
			q := find(rs, sim.LeakyQueue)
			s := fmt.Sprintf("From idle, the buckets (token, leaky, GCRA) allowed %d at once, their capacity; "+
				"the windows allowed %d, their rate; the rest were denied.",
				find(rs, string(sluice.AlgoTokenBucket)).Passed, find(rs, string(sluice.AlgoSlidingLog)).Passed)
			if q.Passed > 1 {
				s += fmt.Sprintf(" The leaky queue admitted %d but does not pass them at once: they leave %s apart, the last after %s.",
					q.Passed, fmtDur(l.Period/time.Duration(l.Rate)), fmtDur(q.LastDelay()))
			}
			if sc := find(rs, string(sluice.AlgoSlidingCounter)); sc.Retry != find(rs, string(sluice.AlgoFixedWindow)).Retry {
				s += fmt.Sprintf(" The sliding counter's retry is %s, not %s: at t=%s its estimate still counts the whole window before it.",
					fmtDur(sc.Retry), fmtDur(find(rs, string(sluice.AlgoFixedWindow)).Retry), fmtDur(l.Period))
			}
			if l.Capacity() == l.Rate {
				s += " With -burst above the rate, the buckets take more at once and the windows do not."
			}
			return s
		},
	},
	{
		Scenario: mustScenario("steady"),
		shows: func(l sluice.Limit, at []time.Duration, rs []*sim.Result) string {
			var deniers []string
			for _, r := range rs {
				if r.Denied() > 0 {
					deniers = append(deniers, fmt.Sprintf("the %s denied %d", r.Name, r.Denied()))
				}
			}
			if len(deniers) > 0 {
				return "A stream within the rate mostly passes, but " + strings.Join(deniers, ", ") + "."
			}
			s := fmt.Sprintf("A stream within the rate passes everywhere: every limiter refills or slides on between requests, so each allowed all %d", len(at))
			if find(rs, sim.LeakyQueue).LastDelay() == 0 {
				s += " and the leaky queue delayed none"
			}
			return s + "."
		},
	},
	{
		Scenario: mustScenario("boundary"),
		shows: func(l sluice.Limit, at []time.Duration, rs []*sim.Result) string {
			fw, lg, sc := find(rs, string(sluice.AlgoFixedWindow)), find(rs, string(sluice.AlgoSlidingLog)), find(rs, string(sluice.AlgoSlidingCounter))
			s := fmt.Sprintf("The fixed window passed %d in %s across its boundary at t=%s, %s its rate of %d per %s: its count starts over at the boundary. "+
				"The sliding log, exact, passed %d; the buckets %d; the sliding counter %d.",
				fw.Passed, fmtDur(at[len(at)-1]-at[0]), fmtDur(l.Period), times(fw.Passed, l.Rate), l.Rate, fmtDur(l.Period),
				lg.Passed, find(rs, string(sluice.AlgoTokenBucket)).Passed, sc.Passed)
			if lg.Denied() > 0 && sc.Denied() > 0 {
				s += fmt.Sprintf(" But the counter is an estimate: it would allow the next request %s after the boundary, the log only %s after it, when the first request leaves its window.",
					fmtDur(sc.Retry), fmtDur(lg.Retry))
			}
			return s
		},
	},
}

func mustScenario(name string) sim.Scenario {
	s, ok := sim.FindScenario(name)
	if !ok {
		panic("demo: no scenario " + name)
	}
	return s
}

func findScenario(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.Name == name {
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

// find returns the result of the algorithm whose ID is id.
func find(rs []*sim.Result, id string) *sim.Result {
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	panic("demo: no result for " + id)
}

// replay runs scenario s under limit l, through every algorithm (package
// sim), and prints the table.
func replay(w io.Writer, s scenario, l sluice.Limit) error {
	at := s.Arrivals(l)
	var rs []*sim.Result
	for _, a := range sim.Algorithms {
		r, err := sim.Run(context.Background(), a, l, at)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}

	fmt.Fprintf(w, "== %s: limit %d/%s, bucket capacity %d ==\n", s.Name, l.Rate, fmtDur(l.Period), l.Capacity())
	wrap(w, s.Describe(l, at))
	fmt.Fprintln(w)
	retryWidth := len("1.000000001s") // the same columns in every scenario, mostly
	for _, r := range rs {
		retryWidth = max(retryWidth, len(r.RetryString()))
	}
	row := func(name, allowed, denied, retry, line string) {
		fmt.Fprintf(w, "%-15s  %7s  %6s  %-*s  %s\n", name, allowed, denied, retryWidth, retry, line)
	}
	row("algorithm", "allowed", "denied", "retry after", "timeline")
	for _, r := range rs {
		row(r.Name, strconv.FormatInt(r.Passed, 10), strconv.FormatInt(r.Denied(), 10), r.RetryString(), sim.Timeline(r.Allowed, at, l.Period))
	}
	fmt.Fprintln(w)
	wrap(w, "Leaky queue release delays: "+delayList(find(rs, sim.LeakyQueue).Delays)+".")
	fmt.Fprintln(w)
	wrap(w, "Shows: "+s.shows(l, at, rs))
	return nil
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
func wrap(w io.Writer, text string) { hanging(w, "", 0, "", text) }

// hanging writes label after indent, then text from column col, in lines
// of at most 79 columns, the later ones indented to col too.
func hanging(w io.Writer, indent string, col int, label, text string) {
	const width = 79
	pad := strings.Repeat(" ", col)
	head := indent + label
	fmt.Fprint(w, head)
	line := len(head)
	if col > 0 {
		fmt.Fprint(w, pad[min(len(head), col):])
		line = max(line, col)
	}
	for i, word := range strings.Fields(text) {
		if i > 0 && line+1+len(word) > width {
			fmt.Fprint(w, "\n"+pad)
			line = col
		} else if i > 0 {
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += len(word)
	}
	fmt.Fprintln(w)
}
