package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides requests against keyed rules held in a Store: several
// rules at once, all-or-nothing among gate rules (a usage rule is recorded
// whatever the others say; see Store), with a failure policy for when the
// store cannot answer. It is the edge that reads the clock. It is safe for
// concurrent use.
type Limiter struct {
	store       Store
	fallback    Store
	clock       Clock
	closedRetry time.Duration
}

// Result is a Limiter's answer for one request.
type Result struct {
	// Decision combines the checks: allowed iff every check not in shadow
	// mode allows; Limit and Remaining of the most restrictive such check;
	// the longest RetryAfter and ResetAfter.
	Decision
	// Decisions holds each check's own decision, in the order of the
	// checks, shadow ones included.
	Decisions []Decision
	// Err is the store's error when the failure policy made the decision,
	// and nil when the store answered. When the store shed the request
	// (ErrShed), Err wraps ErrShed and every check denies, whatever its
	// failure mode. With Err set, the charges of usage rules (ChargeUsage,
	// ChargeCount) that were not peeks never reached the store: recorded
	// by the fallback store for a rule that falls back (FailLocal, and
	// FailDefault with a fallback; not for a request shed), lost for the
	// others. Count them, as sluice serve does in a metric, to know
	// how much usage went unrecorded.
	Err error
}

// LimiterOption configures a Limiter: WithClock, WithFallback,
// WithFailClosedRetry.
type LimiterOption interface{ applyLimiter(*Limiter) }

type limiterOption func(*Limiter)

func (f limiterOption) applyLimiter(l *Limiter) { f(l) }

// ClockOption sets the clock an edge reads: it configures a Limiter and a
// LeakyQueue alike. Make one with WithClock.
type ClockOption struct{ c Clock }

// WithClock sets the clock a Limiter decides at, or a LeakyQueue's Wait
// reads. The default, and a nil c, is SystemClock.
func WithClock(c Clock) ClockOption { return ClockOption{c} }

func (o ClockOption) applyLimiter(l *Limiter) {
	if o.c != nil {
		l.clock = o.c
	}
}

func (o ClockOption) applyQueue(q *LeakyQueue) {
	if o.c != nil {
		q.clock = o.c
	}
}

// WithFallback sets the store that decides rules with FailLocal, and
// those with FailDefault, while the main store fails: typically a memory
// store. Without one, FailLocal rules fail closed and FailDefault rules
// open, but for a store out of room for a new key (ErrNoRoom), where
// FailLocal rules fail open too; so do they when the fallback is out of
// room.
func WithFallback(s Store) LimiterOption { return limiterOption(func(l *Limiter) { l.fallback = s }) }

// WithFailClosedRetry sets the RetryAfter of a request denied because the
// store failed and its rule fails closed. The default is one second.
func WithFailClosedRetry(d time.Duration) LimiterOption {
	return limiterOption(func(l *Limiter) { l.closedRetry = max(d, 0) })
}

// ErrNoStore is returned by NewLimiter without a store.
var ErrNoStore = errors.New("sluice: limiter needs a store")

// ErrRefused is wrapped by a store's error for a request it will not
// decide as given: a limit outside the range it can hold, a key named
// twice where it cannot charge it twice, checks it cannot decide together.
// The Limiter returns such an error as bad input, from Take, rather than
// applying the rules' failure modes, which are for a store that fails: a
// refusal would be the same on every try, and failing open on it would
// let every request through unseen.
var ErrRefused = errors.New("sluice: refused by the store")

// ErrShed is wrapped by a store's error for a request it had no room
// for before the request's deadline: too much work was already in flight
// towards it, and the request waited past its deadline for its turn. Such
// a request was not decided, and charged nothing unless the store says
// otherwise. It is load, not failure: the Limiter denies
// it, every check with RetryAfter ShedRetry, whatever the rules' failure
// modes, since a failure mode that allows would let a flood switch the
// limits off.
var ErrShed = errors.New("sluice: shed: too much work in flight towards the store")

// ShedRetry is the RetryAfter of a request the store shed (ErrShed).
const ShedRetry = time.Second

// ErrNoRoom is wrapped by a store's error for a request that would add a
// key the store has no room to hold, every key it could evict being one
// that denies (memory.ErrFull): forgetting a denying key would let its
// client start afresh. The Limiter decides such a request by its rules'
// failure modes, a rule that fails local as one that fails open unless a
// fallback store is set (WithFallback): the store out of room is the
// local one. A fallback out of room fails its rules open alike.
var ErrNoRoom = errors.New("sluice: no room in the store for a new key")

// NewLimiter returns a Limiter over store.
func NewLimiter(store Store, opts ...LimiterOption) (*Limiter, error) {
	if store == nil {
		return nil, ErrNoStore
	}
	l := &Limiter{store: store, clock: SystemClock, closedRetry: time.Second}
	for _, o := range opts {
		o.applyLimiter(l)
	}
	return l, nil
}

// Prepare prepares r (Rule.Prepare) for this Limiter: it errs for an
// invalid rule and, if the store is a RuleChecker, for a rule the store
// would refuse at every request (wrapping ErrRefused). Call it where the
// rule is loaded: the middleware does when it is made, and the service
// when it loads a config.
func (l *Limiter) Prepare(r Rule) (*PreparedRule, error) {
	p, err := r.Prepare()
	if err != nil {
		return nil, err
	}
	if rc, ok := l.store.(RuleChecker); ok {
		if err := rc.CheckRule(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Take decides a request against checks, each taking its Units, at the
// clock's now. out, if it has room, receives the per-check decisions and
// becomes Result.Decisions, so that a caller can reuse it; nil is fine.
// ctx goes to the store as it is: the store applies its own deadline.
//
// The error is for bad input (a check without a prepared rule, or with
// both Peek and a Cost, or a request the store refuses: ErrRefused) and
// for ctx; a store failure is handled by each rule's Failure and reported
// in Result.Err; a request the store shed (ErrShed) is denied and
// reported there too.
func (l *Limiter) Take(ctx context.Context, checks []Check, out []Decision) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	for i := range checks {
		// A check the store would refuse is bad input: a fail-open rule
		// would turn that refusal into an allowed request.
		if c := &checks[i]; c.Rule == nil || c.Rule.spec == nil {
			return Result{}, fmt.Errorf("sluice: check %d has no prepared rule", i)
		} else if c.Peek && c.Cost != 0 {
			return Result{}, fmt.Errorf("sluice: check %d: a peek with a cost of %d", i, c.Cost)
		}
	}
	if cap(out) < len(checks) {
		out = make([]Decision, len(checks))
	}
	out = out[:len(checks)]
	now := l.clock.Now()
	if err = l.store.Take(ctx, now, checks, out); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Result{}, cerr
		}
		if errors.Is(err, ErrRefused) {
			return Result{}, err
		}
		res.Err = err
		if errors.Is(err, ErrShed) {
			shed(checks, out)
		} else {
			l.degrade(ctx, now, checks, out, errors.Is(err, ErrNoRoom))
		}
	}
	// res is filled in place, field by field: see combineInto.
	res.Decisions = out
	combineInto(&res.Decision, checks, out)
	return res, nil
}

// shed denies every check of a request the store shed: nothing was
// charged, and the same request may try again after ShedRetry.
func shed(checks []Check, out []Decision) {
	for i := range checks {
		out[i] = Decision{Limit: checks[i].Rule.Quota(), RetryAfter: ShedRetry}
	}
}

// degrade decides every check by its rule's Failure after the store
// erred; noRoom says it erred for want of room (ErrNoRoom). A FailLocal
// check goes to the fallback store as it would have gone to the store:
// when a FailClosed check denies the request, the fallback's gate checks
// only report their state, and its usage checks are recorded all the
// same.
func (l *Limiter) degrade(ctx context.Context, now time.Time, checks []Check, out []Decision, noRoom bool) {
	var local []int
	closed := false
	for i := range checks {
		r := checks[i].Rule
		mode := l.failure(r.rule.Failure, noRoom)
		q := r.Quota()
		switch mode {
		case FailOpen:
			out[i] = Decision{Allowed: true, Limit: q, Remaining: q}
		case FailClosed:
			out[i] = Decision{Limit: q, RetryAfter: l.closedRetry}
			closed = closed || !r.rule.Shadow
		case FailLocal:
			local = append(local, i)
		}
	}
	if len(local) == 0 {
		return
	}
	lc := make([]Check, len(local))
	ld := make([]Decision, len(local))
	for j, i := range local {
		lc[j] = checks[i]
		if closed && checks[i].Rule.rule.Charge == ChargeGate {
			// The request is denied anyway: a gate check reports its local
			// state, charging nothing; a usage check is recorded.
			lc[j].Cost, lc[j].Peek = 0, true
		}
	}
	if err := l.fallback.Take(ctx, now, lc, ld); err != nil {
		// The fallback failing too, the rules fail closed; the fallback
		// out of room, they fail open, as on a memory store alone.
		for _, i := range local {
			q := checks[i].Rule.Quota()
			out[i] = Decision{Limit: q, RetryAfter: l.closedRetry}
			if errors.Is(err, ErrNoRoom) {
				out[i] = Decision{Allowed: true, Limit: q, Remaining: q}
			}
		}
		return
	}
	for j, i := range local {
		out[i] = ld[j]
	}
}

// failure is the failure mode the Limiter applies for f: FailDefault
// resolved by whether there is a fallback, and FailLocal without one
// failing closed, or open for a store out of room (noRoom).
func (l *Limiter) failure(f Failure, noRoom bool) Failure {
	switch {
	case f == FailDefault && l.fallback != nil:
		return FailLocal
	case f == FailDefault:
		return FailOpen
	case f == FailLocal && l.fallback == nil && noRoom:
		return FailOpen
	case f == FailLocal && l.fallback == nil:
		return FailClosed
	}
	return f
}

// Combine folds per-check decisions into one: allowed iff every check not
// in shadow mode allows; Limit and Remaining of the check Tightest names;
// the longest RetryAfter and ResetAfter. Shadow checks count only when
// every check is in shadow mode. No checks at all is allowed.
func Combine(checks []Check, ds []Decision) Decision {
	var c Decision
	combineInto(&c, checks, ds)
	return c
}

// combineInto is Combine writing to *c, which it sets whole. The common
// request of one enforced check is that check's decision, which it copies
// field by field: a Decision has too many fields for the compiler to keep
// in registers, and a copy of one as a block, with 16-byte moves, just
// after the store wrote it a field at a time, stalls the processor: the
// loads cannot be forwarded from the pending stores.
func combineInto(c *Decision, checks []Check, ds []Decision) {
	if len(checks) == 1 && !checks[0].Rule.rule.Shadow {
		// Spare the one check the loops below, which walk the checks
		// three times.
		d := &ds[0]
		c.Allowed, c.Limit, c.Remaining = d.Allowed, d.Limit, d.Remaining
		c.RetryAfter, c.ResetAfter = max(d.RetryAfter, 0), max(d.ResetAfter, 0)
		if d.Allowed {
			c.RetryAfter = 0
		}
		return
	}
	*c = Decision{Allowed: true}
	enforced := enforcedAny(checks)
	for i := range checks {
		if enforced && checks[i].Rule.rule.Shadow {
			continue
		}
		d := &ds[i]
		allowed, retry := d.Allowed, d.RetryAfter
		if !enforced {
			allowed, retry = true, 0 // shadow: reported, never denied
		}
		c.Allowed = c.Allowed && allowed
		c.RetryAfter = max(c.RetryAfter, retry)
		c.ResetAfter = max(c.ResetAfter, d.ResetAfter)
	}
	if t := Tightest(checks, ds); t >= 0 {
		c.Limit, c.Remaining = ds[t].Limit, ds[t].Remaining
	}
	if c.Allowed {
		c.RetryAfter = 0
	}
}

// Tightest is the index of the most restrictive check, the one whose
// Limit and Remaining Combine reports: of the checks not in shadow mode
// (of all, when every one is), the first with the least Remaining. It is
// -1 when there are no checks.
func Tightest(checks []Check, ds []Decision) int {
	enforced := enforcedAny(checks)
	t := -1
	for i := range checks {
		if enforced && checks[i].Rule.rule.Shadow {
			continue
		}
		if t < 0 || ds[i].Remaining < ds[t].Remaining {
			t = i
		}
	}
	return t
}

func enforcedAny(checks []Check) bool {
	for i := range checks {
		if !checks[i].Rule.rule.Shadow {
			return true
		}
	}
	return false
}
