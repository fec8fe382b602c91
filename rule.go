package sluice

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/algo"
)

// Algo names one of the six algorithms, as configuration spells it.
type Algo string

// The algorithms a Rule can use.
const (
	AlgoTokenBucket    Algo = "token_bucket"
	AlgoLeakyBucket    Algo = "leaky_bucket"
	AlgoGCRA           Algo = "gcra"
	AlgoFixedWindow    Algo = "fixed_window"
	AlgoSlidingLog     Algo = "sliding_log"
	AlgoSlidingCounter Algo = "sliding_counter"
)

// Algos lists every algorithm: the four classic ones (token bucket, leaky
// bucket, fixed window, and the sliding window as a log and as a
// counter), then GCRA.
var Algos = []Algo{AlgoTokenBucket, AlgoLeakyBucket, AlgoFixedWindow, AlgoSlidingLog, AlgoSlidingCounter, AlgoGCRA}

// ErrUnknownAlgo is wrapped by the error for an algorithm name sluice does
// not know.
var ErrUnknownAlgo = fmt.Errorf("unknown algorithm")

// ParseAlgo returns the algorithm called s ("gcra", "token_bucket", ...).
func ParseAlgo(s string) (Algo, error) {
	for _, a := range Algos {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("sluice: %w %q (want one of token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_counter, gcra)", ErrUnknownAlgo, s)
}

// New returns a single-key limiter of this algorithm for l.
func (a Algo) New(l Limit) (Algorithm, error) {
	switch a {
	case AlgoTokenBucket:
		return NewTokenBucket(l)
	case AlgoLeakyBucket:
		return NewLeakyBucket(l)
	case AlgoGCRA:
		return NewGCRA(l)
	case AlgoFixedWindow:
		return NewFixedWindow(l)
	case AlgoSlidingLog:
		return NewSlidingLog(l)
	case AlgoSlidingCounter:
		return NewSlidingCounter(l)
	}
	_, err := ParseAlgo(string(a))
	return nil, err
}

// Failure says what a rule decides when its store cannot answer.
type Failure uint8

const (
	// FailOpen allows the request: availability over protection. It is
	// the default.
	FailOpen Failure = iota
	// FailClosed denies the request.
	FailClosed
	// FailLocal decides with a local, in-process limiter instead: each
	// process then enforces the limit on its own.
	FailLocal
)

// String returns "open", "closed" or "local".
func (f Failure) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return fmt.Sprintf("Failure(%d)", uint8(f))
}

// Rule is a named limit with its algorithm: "10 per second per IP, token
// bucket". The key it applies to comes with each request, in a Check.
type Rule struct {
	// Name identifies the rule in keys, headers and metrics. It must be
	// non-empty.
	Name      string
	Algorithm Algo
	Limit     Limit
	// Shadow rules decide and are counted but never deny: a way to try a
	// limit on live traffic.
	Shadow bool
	// Failure is what the rule decides when the store errs. The default
	// is FailOpen.
	Failure Failure
}

// Validate reports whether the rule is usable: a name, a known algorithm,
// a valid limit the algorithm can hold, and a known failure mode.
func (r *Rule) Validate() error {
	if r.Name == "" {
		return fmt.Errorf("sluice: rule has no name")
	}
	if r.Failure > FailLocal {
		return fmt.Errorf("sluice: rule %q: unknown failure mode %d", r.Name, r.Failure)
	}
	if err := r.Algorithm.check(r.Limit); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return nil
}

// check reports whether the algorithm can hold l, as New would, without
// building a limiter: a sliding log's ring can be megabytes.
func (a Algo) check(l Limit) error {
	switch a {
	case AlgoTokenBucket, AlgoLeakyBucket, AlgoGCRA:
		// The Limiter validates every check of every request: this must
		// not prepare the arithmetic as l.tat() does.
		if err := l.Validate(); err != nil {
			return err
		}
		if err := algo.Check(l.Rate, l.Period, l.Capacity()); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
		return nil
	case AlgoFixedWindow, AlgoSlidingCounter:
		return l.Validate()
	case AlgoSlidingLog:
		if err := l.Validate(); err != nil {
			return err
		}
		if _, err := algo.NewLog(l.Rate, l.Period); err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
		return nil
	}
	_, err := ParseAlgo(string(a))
	return err
}

// Quota is the rule's advertised quota: Burst (or Rate) for the buckets and
// GCRA, Rate for the windows.
func (r *Rule) Quota() int64 {
	switch r.Algorithm {
	case AlgoFixedWindow, AlgoSlidingLog, AlgoSlidingCounter:
		return r.Limit.Rate
	}
	return r.Limit.Capacity()
}
