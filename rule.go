package sluice

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

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
// counter), then GCRA. The slice is new at each call.
func Algos() []Algo { return slices.Clone(algos[:]) }

var algos = [...]Algo{AlgoTokenBucket, AlgoLeakyBucket, AlgoFixedWindow, AlgoSlidingLog, AlgoSlidingCounter, AlgoGCRA}

// ErrUnknownAlgo is wrapped by the error for an algorithm name sluice does
// not know.
var ErrUnknownAlgo = errors.New("sluice: unknown algorithm")

// ParseAlgo returns the algorithm called s ("gcra", "token_bucket", ...).
func ParseAlgo(s string) (Algo, error) {
	for _, a := range algos {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w %q (want one of token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_counter, gcra)", ErrUnknownAlgo, s)
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

// Charge says how a rule is charged: whether a request that would take
// its limit past zero is refused uncharged, or recorded all the same.
type Charge uint8

const (
	// ChargeGate is all-or-nothing: a request is charged only if every
	// rule of the request allows it, and a request the rule cannot afford
	// is refused and charges nothing. A cost-0 check peeks and is always
	// allowed. It is the zero value: limits that gate admission (requests
	// per second, logins per hour) want it.
	ChargeGate Charge = iota
	// ChargeUsage records usage after the fact: the cost is recorded
	// whatever is left, so a limit can be taken past zero, into debt (a
	// bucket below empty, a window's count above its rate), and the
	// request that went over is answered as over. Debt is capped at one
	// period's worth (a bucket's level never below -Burst, a window's or
	// a log's count never above 2·Rate), so a key left alone is usable
	// again within two periods. A cost-0 check answers over when less
	// than one unit is left. A usage rule is charged even when another
	// rule of the request denies it. LLM tokens, bytes sent and money
	// spent are usage: known only once the work is done, and charged
	// then.
	ChargeUsage
	// ChargeCount is ChargeUsage with envoyproxy/ratelimit's threshold
	// for a cost-0 check: over only when the limit is in debt (used past
	// it), so at exactly zero left it is allowed. sluice serve compiles
	// every limit so in envoy mode, as envoyproxy/ratelimit counts.
	ChargeCount
)

// String returns "gate", "usage" or "count".
func (c Charge) String() string {
	switch c {
	case ChargeGate:
		return "gate"
	case ChargeUsage:
		return "usage"
	case ChargeCount:
		return "count"
	}
	return fmt.Sprintf("Charge(%d)", uint8(c))
}

// Rule is a named limit with its algorithm: "10 per second per IP, token
// bucket". The key it applies to comes with each request, in a Check.
//
// A rule prepares itself once: on first use, or when Validate is called
// (where it is loaded), it is validated and its arithmetic compiled, and
// the result is kept with it, so that deciding a request neither
// validates nor compiles anything. A copy of a prepared Rule carries its
// preparation. Each use compares the rule's Name, Algorithm, Limit and
// Failure with those it was prepared from, and a rule changed since is
// prepared again: a rule reloaded in place keeps working. It must not be
// changed while a request uses it, as any value shared between
// goroutines; to change the rules being served, make new ones and swap
// them in. As the preparation is part of the value, == may tell apart two
// rules with the same fields (one prepared, or each prepared on its own):
// use Equal.
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
	// Charge is how requests are charged: ChargeGate (the zero value,
	// all-or-nothing) or ChargeUsage (recorded after the fact, into
	// bounded debt). It does not change which state a key keeps: a rule
	// switched between them keeps its keys' counts.
	Charge Charge

	// prepared holds the *prepared made by the latest preparation. It is
	// an atomic.Value, not an atomic.Pointer, so that a Rule may still be
	// copied (go vet's copylocks check flags atomic.Pointer).
	prepared atomic.Value
}

// Equal reports whether r and o have the same fields. Their preparations
// are not compared: equal rules compile alike, and share their keys'
// states in a store.
func (r *Rule) Equal(o *Rule) bool {
	return r.Name == o.Name && r.Algorithm == o.Algorithm && r.Limit == o.Limit && r.Shadow == o.Shadow && r.Failure == o.Failure && r.Charge == o.Charge
}

// prepared is what a Rule made of itself: the fields it was made from, to
// notice a change, and the result, a Spec or why there is none.
type prepared struct {
	name    string
	algo    Algo
	limit   Limit
	failure Failure
	charge  Charge
	spec    *algo.Spec
	err     error
}

// of reports whether p was made from r's fields as they are. It is the one
// thing a prepared rule does per use, so it compares field by field, the
// cheapest first, without building a key.
func (p *prepared) of(r *Rule) bool {
	return p.limit.Rate == r.Limit.Rate && p.limit.Period == r.Limit.Period && p.limit.Burst == r.Limit.Burst &&
		p.failure == r.Failure && p.charge == r.Charge && same(p.name, r.Name) && same(string(p.algo), string(r.Algorithm))
}

// same reports whether a == b. The strings a rule was prepared from are
// most often the very strings it still holds, which same tells by their
// address, without the call that compares bytes: a request through the
// Limiter checks its rule twice (the Limiter, then the store), and those
// four calls took about 5 ns of an in-cache decision of about 110.
func same(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// Validate reports whether the rule is usable: a name, a known algorithm,
// a valid limit the algorithm can hold, and a known failure mode. It
// prepares the rule (see Rule): call it where the rule is loaded.
func (r *Rule) Validate() error {
	_, err := r.Spec()
	return err
}

// Spec returns the rule's compiled arithmetic, for the stores: the memory
// and Redis stores read it on every request instead of keeping a cache of
// rules. It prepares the rule on first use and after a change (see Rule),
// and otherwise only compares the rule with what it was prepared from. The
// error is Validate's. The type is internal to this module and may change
// with it: code outside this repository has no use for it.
func (r *Rule) Spec() (*algo.Spec, error) {
	p, _ := r.prepared.Load().(*prepared)
	if p == nil || !p.of(r) {
		p = r.prepare()
	}
	return p.spec, p.err
}

// prepare validates and compiles r and keeps the result with it. Racing
// first uses may each prepare r: the results are equivalent.
func (r *Rule) prepare() *prepared {
	p := &prepared{name: r.Name, algo: r.Algorithm, limit: r.Limit, failure: r.Failure, charge: r.Charge}
	p.spec, p.err = compile(algo.Key{Name: p.name, Algo: string(p.algo), Rate: p.limit.Rate, Period: p.limit.Period, Burst: p.limit.Burst}, p.failure, p.charge)
	r.prepared.Store(p)
	return p
}

// compile validates the rule k with failure mode f and charge c and
// compiles it.
func compile(k algo.Key, f Failure, c Charge) (*algo.Spec, error) {
	if k.Name == "" {
		return nil, fmt.Errorf("sluice: rule has no name")
	}
	if f > FailLocal {
		return nil, fmt.Errorf("sluice: rule %q: unknown failure mode %d", k.Name, f)
	}
	if c > ChargeCount {
		return nil, fmt.Errorf("sluice: rule %q: unknown charge %d", k.Name, c)
	}
	kind, err := Algo(k.Algo).kind()
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", k.Name, err)
	}
	if err := (Limit{Rate: k.Rate, Period: k.Period, Burst: k.Burst}).Validate(); err != nil {
		return nil, fmt.Errorf("rule %q: %w", k.Name, err)
	}
	sp, err := algo.NewSpec(k, kind, algo.Charge(c))
	if err != nil {
		return nil, fmt.Errorf("rule %q: sluice: %w", k.Name, err)
	}
	return sp, nil
}

// kind is the state the algorithm keeps.
func (a Algo) kind() (algo.Kind, error) {
	switch a {
	case AlgoTokenBucket, AlgoLeakyBucket, AlgoGCRA:
		return algo.KindBucket, nil
	case AlgoFixedWindow:
		return algo.KindFixed, nil
	case AlgoSlidingCounter:
		return algo.KindCounter, nil
	case AlgoSlidingLog:
		return algo.KindLog, nil
	}
	_, err := ParseAlgo(string(a))
	return 0, err
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
