package sluice

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Failure says what a rule decides when its store cannot answer:
// FailOpen allows, FailClosed denies, FailLocal decides with the Limiter's
// in-process fallback, and FailDefault, the zero value, is FailLocal when
// the Limiter has a fallback and FailOpen when it has none.
type Failure uint8

// The failure modes are declared one by one, so that go doc lists each
// with its value under Failure.

// FailDefault, the zero value, is FailLocal for a Limiter with a fallback
// store (WithFallback), and FailOpen for one without: a Limiter given a
// fallback uses it unless a rule says otherwise.
const FailDefault Failure = 0

// FailOpen allows the request: availability over protection.
const FailOpen Failure = 1

// FailClosed denies the request.
const FailClosed Failure = 2

// FailLocal decides with the Limiter's fallback store (WithFallback), an
// in-process limiter: each process then enforces the limit on its own.
// Without a fallback it fails closed.
const FailLocal Failure = 3

// String returns "default", "open", "closed" or "local".
func (f Failure) String() string {
	switch f {
	case FailDefault:
		return "default"
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
// ChargeGate, the zero value, refuses it (requests, logins); ChargeUsage
// records it, into debt (LLM tokens, bytes, money, known once the work is
// done); ChargeCount records it and answers a peek as
// envoyproxy/ratelimit does.
type Charge uint8

// The charges are declared one by one, so that go doc lists each with
// its value under Charge.

// ChargeGate is all-or-nothing: a request is charged only if every
// rule of the request allows it, and a request the rule cannot afford
// is refused and charges nothing. A peek (Check.Peek) is always
// allowed. It is the zero value: limits that gate admission (requests
// per second, logins per hour) want it.
const ChargeGate Charge = 0

// ChargeUsage records usage after the fact: the cost is recorded
// whatever is left, so a limit can be taken past zero, into debt (a
// bucket below empty, a window's count above its rate), and the
// request that went over is answered as over. Debt is capped at one
// period's worth (a bucket's level never below -Burst, a window's or
// a log's count never above 2·Rate), so a key left alone is usable
// again within two periods. A peek (Check.Peek) answers over when
// less than one unit is left. A usage rule is charged even when another
// rule of the request denies it. LLM tokens, bytes sent and money
// spent are usage: known only once the work is done, and charged
// then.
const ChargeUsage Charge = 1

// ChargeCount is ChargeUsage with envoyproxy/ratelimit's threshold
// for a peek: over only when the limit is in debt (used past
// it), so at exactly zero left it is allowed. sluice serve compiles
// every limit so in envoy mode, as envoyproxy/ratelimit counts.
const ChargeCount Charge = 2

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
// bucket". It is a declaration, a plain value: == compares two rules.
// The key it applies to comes with each request, in a Check, which takes
// the rule prepared (Prepare): validated and compiled once, where it is
// loaded, so that deciding a request neither validates nor compiles
// anything.
type Rule struct {
	// Name identifies the rule in keys, headers and metrics. It must be
	// non-empty.
	Name      string
	Algorithm Algo
	Limit     Limit
	// Shadow rules decide and are counted but never deny: a way to try a
	// limit on live traffic.
	Shadow bool
	// Failure is what the rule decides when the store errs. The zero
	// value, FailDefault, uses the Limiter's fallback store if it has one
	// and otherwise allows.
	Failure Failure
	// Charge is how requests are charged: ChargeGate (the zero value,
	// all-or-nothing) or ChargeUsage (recorded after the fact, into
	// bounded debt). It does not change which state a key keeps: a rule
	// switched between them keeps its keys' counts.
	Charge Charge
	// Lease, when enabled, has the rule decided on quota leased from a
	// shared authority (package lease) rather than exactly in the store,
	// for fewer shared operations at a stated bound. The zero Lease, the
	// default, decides exactly; a store given a leased rule directly
	// decides it exactly.
	Lease Lease
}

// Lease is how a rule is decided on leased quota (package lease): each
// process holds a share of a key's quota and decides locally from it,
// renewing as it goes. It is a plain value, so that == still compares
// two rules.
type Lease struct {
	// Enabled turns leasing on for the rule. Only the token bucket, the
	// leaky bucket, GCRA and the fixed window can be leased, charged as a
	// gate (ChargeGate), with Rate and capacity at most MaxLeaseQuota;
	// Validate refuses the others.
	Enabled bool
	// Renew is how often a holder reports its demand and is given its
	// share again, at least MinLeaseRenew and at most Period and 24
	// hours. Zero is the default:
	// Period/10 within [50ms, 10s], but no longer than Period or TTL
	// (see Times); a Period or TTL that makes it shorter than
	// MinLeaseRenew is refused.
	Renew time.Duration
	// TTL is how long a share holds without a renewal: a holder cut off
	// from the authority decides on it until then, and a holder that
	// died gives it back then. It must not be shorter than Renew, nor
	// longer than a week. Zero is the default: three Renews. A quiet key
	// (its holders asking at most half the quota) renews less often, up
	// to 32 Renews or 10s apart, and its shares hold that much longer
	// (package lease).
	TTL time.Duration
}

// MaxLeaseQuota bounds the Rate and the capacity (Limit.Capacity) of a
// leased rule: the authorities divide them in float64, in Go and in
// Redis's Lua alike, and below this the products they take are exact.
const MaxLeaseQuota = 1 << 25

// MinLeaseRenew is the shortest renewal interval a leased rule may have:
// a holder renewing more often costs the authority about as much as an
// exact decision per request would, and a renewal's own round trip
// would take most of its interval.
const MinLeaseRenew = 10 * time.Millisecond

// Times returns the renewal interval and the time to live of a lease on a
// limit of period, its zero fields replaced by their defaults: Renew is
// Period/10 within [50ms, 10s] but no longer than Period or TTL, TTL is
// three Renews.
func (l Lease) Times(period time.Duration) (renew, ttl time.Duration) {
	renew, ttl = l.Renew, l.TTL
	if renew == 0 {
		renew = min(max(period/10, 50*time.Millisecond), 10*time.Second, period)
		if ttl > 0 {
			renew = min(renew, ttl)
		}
	}
	if ttl == 0 {
		ttl = 3 * renew
	}
	return renew, ttl
}

// validateLease checks a leased rule: an algorithm whose share can be
// decided locally (the buckets and the fixed window), charged as a gate,
// a quota the authorities divide exactly, and times that make sense.
func (r Rule) validateLease(kind algo.Kind) error {
	l := r.Lease
	if !l.Enabled {
		return nil
	}
	switch {
	case kind != algo.KindBucket && kind != algo.KindFixed:
		return fmt.Errorf("algorithm %s cannot be leased (token_bucket, leaky_bucket, gcra and fixed_window can)", r.Algorithm)
	case r.Charge != ChargeGate:
		return fmt.Errorf("a rule charged by %s cannot be leased: a lease decides before the cost is known, so only gate rules can", r.Charge)
	case r.Limit.Rate > MaxLeaseQuota:
		return fmt.Errorf("rate %d is above %d, the most a lease divides exactly", r.Limit.Rate, MaxLeaseQuota)
	case r.Limit.Capacity() > MaxLeaseQuota:
		return fmt.Errorf("burst %d is above %d, the most a lease divides exactly", r.Limit.Capacity(), MaxLeaseQuota)
	case l.Renew < 0:
		return fmt.Errorf("renew %v must not be negative", l.Renew)
	case l.TTL < 0:
		return fmt.Errorf("ttl %v must not be negative", l.TTL)
	case l.Renew > r.Limit.Period:
		return fmt.Errorf("renew %v must not be longer than the period %v", l.Renew, r.Limit.Period)
	case l.Renew > 0 && l.Renew < MinLeaseRenew:
		return fmt.Errorf("renew %v is shorter than the minimum, %v", l.Renew, MinLeaseRenew)
	case l.Renew > 24*time.Hour || l.TTL > 7*24*time.Hour:
		return fmt.Errorf("renew %v and ttl %v must be at most 24h and 168h", l.Renew, l.TTL)
	case l.Renew > 0 && l.TTL > 0 && l.TTL < l.Renew:
		return fmt.Errorf("ttl %v must not be shorter than renew %v", l.TTL, l.Renew)
	}
	if renew, _ := l.Times(r.Limit.Period); renew < MinLeaseRenew {
		return fmt.Errorf("renew %v (the default for period %v and ttl %v) is shorter than the minimum, %v", renew, r.Limit.Period, l.TTL, MinLeaseRenew)
	}
	return nil
}

// Validate reports whether the rule is usable: a name, a known algorithm,
// a valid limit the algorithm can hold, a known failure mode and charge,
// and for a leased rule a lease that can be held (see Lease).
func (r Rule) Validate() error {
	_, err := r.compile()
	return err
}

// Prepare validates r and compiles its arithmetic, once: call it where
// the rule is loaded, and use the result in every Check. A Limiter's
// Prepare also asks its store whether it can hold the rule; most callers
// should use that.
func (r Rule) Prepare() (*PreparedRule, error) {
	sp, err := r.compile()
	if err != nil {
		return nil, err
	}
	return &PreparedRule{rule: r, spec: sp, quota: r.Quota()}, nil
}

// PreparedRule is a Rule ready to decide requests: validated, its
// arithmetic compiled. It is immutable and safe for concurrent use; to
// change a rule being served, prepare the new one and swap it in.
// PreparedRules of the same name, algorithm and limit share their keys'
// states in a store, so that a configuration reloaded with the same rules
// keeps every count. The zero PreparedRule is not prepared: a check with
// one is refused.
type PreparedRule struct {
	rule  Rule
	spec  *algo.Spec
	quota int64 // Rule.Quota, which every decision reports, read once
}

// Rule returns the declaration p was prepared from.
func (p *PreparedRule) Rule() Rule { return p.rule }

// Name returns the rule's name.
func (p *PreparedRule) Name() string { return p.rule.Name }

// Shadow reports whether the rule is in shadow mode: decided and
// counted, never denying.
func (p *PreparedRule) Shadow() bool { return p.rule.Shadow }

// Quota is the rule's advertised quota: Burst (or Rate) for the buckets
// and GCRA, Rate for the windows.
func (p *PreparedRule) Quota() int64 { return p.quota }

// The stores, outside this package, read a prepared rule's arithmetic
// through algo.Of; a nil or zero PreparedRule has none. The arithmetic's
// errors for a limit too large are this package's.
func init() {
	algo.ErrTooLarge = ErrLimitTooLarge
	algo.Of = func(rule any) *algo.Spec {
		if p, _ := rule.(*PreparedRule); p != nil {
			return p.spec
		}
		return nil
	}
}

// compile validates r and compiles it.
func (r Rule) compile() (*algo.Spec, error) {
	if r.Name == "" {
		return nil, fmt.Errorf("sluice: rule has no name")
	}
	if r.Failure > FailLocal {
		return nil, fmt.Errorf("sluice: rule %q: unknown failure mode %d", r.Name, r.Failure)
	}
	if r.Charge > ChargeCount {
		return nil, fmt.Errorf("sluice: rule %q: unknown charge %d", r.Name, r.Charge)
	}
	kind, err := r.Algorithm.kind()
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if err := r.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if err := r.validateLease(kind); err != nil {
		return nil, fmt.Errorf("sluice: rule %q: lease: %w", r.Name, err)
	}
	k := algo.Key{Name: r.Name, Algo: string(r.Algorithm), Rate: r.Limit.Rate, Period: r.Limit.Period, Burst: r.Limit.Burst}
	sp, err := algo.NewSpec(k, kind, algo.Charge(r.Charge))
	if err != nil {
		return nil, fmt.Errorf("rule %q: sluice: %w", r.Name, err)
	}
	return sp, nil
}

// Quota is the rule's advertised quota: Burst (or Rate) for the buckets and
// GCRA, Rate for the windows.
func (r Rule) Quota() int64 {
	if info, ok := r.Algorithm.Info(); ok && !info.Bucket {
		return r.Limit.Rate
	}
	return r.Limit.Capacity()
}
