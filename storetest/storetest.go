// Package storetest is the conformance suite for sluice.Store
// implementations: the memory store and the Redis store run the same tests
// and are held to the same decisions as the single-key algorithms. Choose
// it to test a Store of your own; Run's documentation says what it checks.
//
// A store's test calls Run with a Config whose New makes an empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Config{
//			New: func(t *testing.T) sluice.Store {
//				s, err := memory.New()
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { s.Close() })
//				return s
//			},
//		})
//	}
//
// Times are multiples of Config.Resolution, and the durations a store
// returns are compared with the single-key limiter's rounded up to it: a
// store that keeps microseconds answers "retry after 333334µs" where the
// single-key limiter, in nanoseconds, says 333333334ns. A store that
// decides a long bucket at a coarser unit still (the Redis store, at 1ms or
// 1s for 30011 a day) says so with a method
//
//	Resolution(rule *sluice.PreparedRule) (time.Duration, error)
//
// and the suite holds that rule exactly to the bucket's arithmetic at that
// unit.
package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// Config says how to make the store under test and what it supports.
type Config struct {
	// New returns an empty store. It is called once per test, and may
	// register its cleanup with t.Cleanup. Required.
	New func(t *testing.T) sluice.Store
	// Resolution is the store's unit of time. Every time the suite passes
	// is a multiple of it, and the RetryAfter and ResetAfter it expects
	// are rounded up to it. The default is time.Nanosecond.
	Resolution time.Duration
	// Algorithms are the algorithms to test. The default is sluice.Algos(),
	// every one.
	Algorithms []sluice.Algo
	// MaxRate, if positive, leaves out the limits whose Rate or Burst
	// exceeds it. The default, 0, keeps them all; the largest the suite
	// uses is 1000003 (a prime a year).
	MaxRate int64
}

// Run runs the conformance suite against cfg's store, each part as a
// subtest of t.
//
// What it checks, for every algorithm:
//
//   - Trace: random requests (fixed seeds) over several keys, with costs
//     from -1 to the quota + 1 and times that never go back, get exactly the
//     decisions, all five fields, of a fresh single-key limiter per key
//     (rule.Algorithm.New(limit)), for limits with odd rates (3/s, 7/min),
//     bursts above and below the rate, and a rate of 0; and for the rates
//     at the edges of the arithmetic: primes per day, week and year
//     (99991/24h, 30011/24h, 7/168h, 1000003/8760h), 1 a month, a huge burst
//     and 1000003 a second. A bucket the store decides at a coarser unit
//     than the single-key limiter's (see the package's documentation) is
//     held to the bucket's arithmetic at that unit.
//   - Policy: random requests against two or three rules at once, some in
//     shadow mode, get the decisions of the all-or-nothing model: if every
//     enforced check allows, each check that allows is charged; otherwise
//     none is, and a check that would have allowed reports its state as a
//     peek (n = 0) does.
//   - AllOrNothing, Shadow, Peek, Negative, RulesApart: the same, as
//     readable cases.
//   - BadInput: a short out, a rule that is nil or invalid, or a done
//     context is an error and charges nothing.
//   - Concurrent: 16 goroutines on one key at one time get exactly the
//     quota, no more, no less; with two rules, the charges stay
//     all-or-nothing.
//   - Idle: once ResetAfter has passed, a key decides as a fresh one, at
//     the same limits as Trace.
//   - Limiter: the store works under sluice.NewLimiter.
//   - UsageTrace, UsagePolicy: the same as Trace (its limits) and Policy for rules
//     charged by usage (sluice.ChargeUsage, ChargeCount), with costs far
//     past the quota, against the arithmetic charged the same way: usage
//     recorded into capped debt whatever it decides; in a request, usage
//     checks always recorded, gate checks all-or-nothing.
//   - UsageLLM, UsageCap, UsageMixed, UsageZero, UsageConcurrent: the
//     same, as readable cases: "check 0, charge 150" twenty times on 100
//     an hour denies every check after the first charge; a charge of
//     MaxInt64 recorded up to the cap, whole again two periods later; a
//     usage rule recorded
//     when a gate rule denies, a gate rule not charged when a usage rule
//     denies, a shadow usage rule recorded and never blocking; the cost-0
//     thresholds of usage and count; concurrent charges allowed exactly
//     what fits and leaving the key in debt.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.New == nil {
		t.Fatal("storetest: Config.New is required")
	}
	if cfg.Resolution <= 0 {
		cfg.Resolution = time.Nanosecond
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = sluice.Algos()
	}
	s := &suite{cfg: cfg}
	t.Run("Trace", s.testTrace)
	t.Run("Policy", s.testPolicy)
	t.Run("AllOrNothing", s.testAllOrNothing)
	t.Run("Shadow", s.testShadow)
	t.Run("Peek", s.testPeek)
	t.Run("Negative", s.testNegative)
	t.Run("RulesApart", s.testRulesApart)
	t.Run("BadInput", s.testBadInput)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("ConcurrentPolicy", s.testConcurrentPolicy)
	t.Run("Idle", s.testIdle)
	t.Run("Limiter", s.testLimiter)
	t.Run("UsageTrace", s.testUsageTrace)
	t.Run("UsagePolicy", s.testUsagePolicy)
	t.Run("UsageLLM", s.testUsageLLM)
	t.Run("UsageCap", s.testUsageCap)
	t.Run("UsageMixed", s.testUsageMixed)
	t.Run("UsageZero", s.testUsageZero)
	t.Run("UsageConcurrent", s.testUsageConcurrent)
}

type suite struct{ cfg Config }

// t0 is where every trace starts: a multiple of the resolution, not on a
// second, so that windows are not aligned with the trace.
func (s *suite) t0() time.Time {
	ns := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC).UnixNano()
	ns -= ns % int64(s.cfg.Resolution)
	return time.Unix(0, ns).UTC()
}

// floor rounds d down to the resolution.
func (s *suite) floor(d time.Duration) time.Duration { return d - d%s.cfg.Resolution }

// ceil rounds d up to the resolution; Never stays Never.
func (s *suite) ceil(d time.Duration) time.Duration {
	r := s.cfg.Resolution
	if r <= 1 || d <= 0 || d%r == 0 {
		return d
	}
	if d > sluice.Never-r {
		return sluice.Never
	}
	return d + r - d%r
}

// expect is the single-key limiter's decision as the store should give it.
func (s *suite) expect(d sluice.Decision) sluice.Decision {
	d.RetryAfter, d.ResetAfter = s.ceil(d.RetryAfter), s.ceil(d.ResetAfter)
	return d
}

// limits are the limits the suite mixes in policies, without those above
// MaxRate.
func (s *suite) limits() []sluice.Limit {
	return s.fitting([]sluice.Limit{
		sluice.PerSecond(3),
		sluice.PerMinute(7),
		{Rate: 10, Period: time.Second, Burst: 4},
		{Rate: 5, Period: 250 * time.Millisecond, Burst: 12},
		{Rate: 1, Period: time.Hour, Burst: 2},
		{Rate: 0, Period: time.Second, Burst: 2},
	})
}

// year is the period of a limit a year.
const year = 365 * 24 * time.Hour

// traceLimits are the limits traced one at a time: limits and those at
// the edges of the stores' arithmetic. Primes a day, a week and a year
// make buckets whose refill takes more than 2^62 ticks of a ns, or more
// than the Redis script's 2^51 units of a µs, which decide at a coarser
// unit; they are rates people write, and every algorithm takes them. A
// sliding log keeps a cell per unit, so these are left out of policies,
// whose model replays a key's history for every decision.
func (s *suite) traceLimits() []sluice.Limit {
	return append(s.limits(), s.fitting([]sluice.Limit{
		{Rate: 99991, Period: 24 * time.Hour},
		{Rate: 30011, Period: 24 * time.Hour},
		{Rate: 7, Period: 7 * 24 * time.Hour},
		{Rate: 1000003, Period: year},
		{Rate: 1, Period: 30 * 24 * time.Hour},        // tiny: traces of a rate a year would pass the year 2112, Redis's last
		{Rate: 1, Period: 24 * time.Hour, Burst: 1e6}, // a huge burst
		{Rate: 1000003, Period: time.Second},          // huge, odd: a bucket's ticks of a ns wrap in about an hour
	})...)
}

// fitting is all without the limits above MaxRate.
func (s *suite) fitting(all []sluice.Limit) []sluice.Limit {
	var ls []sluice.Limit
	for _, l := range all {
		if s.fits(l) {
			ls = append(ls, l)
		}
	}
	return ls
}

func (s *suite) fits(l sluice.Limit) bool {
	return s.cfg.MaxRate <= 0 || (l.Rate <= s.cfg.MaxRate && l.Burst <= s.cfg.MaxRate)
}

// take calls the store and fails the test on an error.
func take(t *testing.T, st sluice.Store, now time.Time, n int64, checks ...sluice.Check) []sluice.Decision {
	t.Helper()
	out := make([]sluice.Decision, len(checks))
	if err := st.Take(context.Background(), now, costed(n, checks), out); err != nil {
		t.Fatalf("Take(%v, %d, %s) failed: %v", now.Format(time.RFC3339Nano), n, describe(checks), err)
	}
	return out
}

// describe names checks in failure messages: rule/key, shadow marked.
func describe(checks []sluice.Check) string {
	s := "["
	for i, c := range checks {
		if i > 0 {
			s += " "
		}
		if c.Rule == nil {
			s += "<nil>/" + c.Key
			continue
		}
		s += fmt.Sprintf("%s/%q", c.Rule.Name(), c.Key)
		if c.Rule.Shadow() {
			s += "(shadow)"
		}
		if c.Cost != 0 {
			s += fmt.Sprintf("(cost %d)", c.Cost)
		}
	}
	return s + "]"
}

// rel formats now as an offset from t0, for failure messages.
func rel(t0, now time.Time) string { return "t0+" + now.Sub(t0).String() }

// rule prepares a gate rule the suite declares.
func rule(name string, a sluice.Algo, l sluice.Limit) *sluice.PreparedRule {
	return prepare(sluice.Rule{Name: name, Algorithm: a, Limit: l})
}

// The tests' rules are valid, and their requests have a cost (see
// teststore.Costed).
var (
	prepare = teststore.Prepare
	costed  = teststore.Costed
)
