package algo

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"time"
)

// TAT is the arithmetic shared by the token bucket, the leaky bucket (meter
// and queue) and GCRA. They make the same decisions; what differs is only
// the name people know them by. The state is one uint64: the theoretical
// arrival time (TAT) of GCRA, which is also the moment the leaky bucket runs
// dry and B emission intervals after the token bucket was last empty.
//
// Exact integer time. An emission interval Period/Rate is rarely a whole
// number of nanoseconds (1e9/3), so time is counted in ticks of 1/q ns where
// Period/Rate = p/q in lowest terms: one unit costs exactly p ticks and no
// rounding ever accumulates. Tick counts are taken modulo 2^64 and only their
// differences are read, as int64; that is exact as long as a key is touched
// at least once every 2^62/q ns (146 years for rates that divide their
// period, 53 days for 10^12 per second).
//
// A long period at an odd rate (99991 per day) makes p so large that a
// full bucket's span of Burst·p ticks passes 2^62. Such a limit decides at
// a coarser resolution instead: time is read in quanta of res ns (1µs,
// 1ms, 1s: the finest whose span fits), rounded down, and a tick is 1/q
// of a quantum. The rate stays exact; only the instant a unit becomes
// available moves to the next whole quantum. A limit that fits at 1ns
// keeps res = 1 and every decision it made before.
//
// The state X is now+debt in ticks, plus origin: debt is how far the bucket
// is from full. X = 0 means "never used" (a full bucket at any time).
//
// A rule charged by usage (ChargeUsage, ChargeCount) records a request
// that does not fit all the same, taking the bucket below empty: its debt
// goes past span, up to two spans (a level of -Burst; see top), and drains
// as the bucket refills. A debt is never above that but when the clock
// goes back, which reads it larger. The one word cannot tell a time gone
// back from debt, so a usage charge stamped earlier than a time already
// seen meets the cap as of its own time: it may leave up to its lag's
// refill less debt than the same charge at the later time would. A Wide
// state, which reads such a time as Last, keeps the cap exact.
type TAT struct {
	q      uint64 // ticks per nanosecond; 0 when Rate is 0 (no refill)
	p      uint64 // ticks per unit
	span   uint64 // burst*p: the debt of an empty bucket
	burst  int64
	pinv   uint64 // ⌊(2^64-1)/p⌋, so that x/p is a multiply, not a divide
	res    int64  // ns per quantum of time: 1 but for limits that do not fit at 1ns
	charge Charge
}

// resolutions are the quanta of time a bucket may decide at, finest first.
var resolutions = [...]int64{1, 1e3, 1e6, 1e9}

// maxSpan keeps debts and their sums far from overflow in uint64 and int64.
const maxSpan = 1 << 62

// origin offsets the stored state so that 0, the mark of a bucket never
// used, is not a TAT that ordinary times reach: without it a limiter with
// one tick per ns that emptied its bucket just before the Unix epoch (a TAT
// of tick 0) read as never used, and full again. With it, tick 0 is 2^63
// ticks away. A TAT that still lands on the mark is kept one tick later,
// stricter by 1/q ns, rather than forgotten.
const origin = 1 << 63

// ErrTooLarge is returned for a limit whose state cannot be kept exactly.
// Package sluice sets it to its own ErrLimitTooLarge when it is loaded.
var ErrTooLarge = errors.New("limit too large")

// NewTAT prepares the arithmetic for rate units per period with capacity
// burst, at the finest resolution whose span fits in 2^62 ticks. The
// caller has validated period > 0, rate >= 0 and burst >= 0 and replaced a
// zero burst with rate. The error for a limit that fits at none names the
// nearest limits that do.
func NewTAT(rate int64, period time.Duration, burst int64) (TAT, error) {
	for _, res := range resolutions {
		if t, ok := NewTATAt(rate, period, burst, time.Duration(res)); ok {
			return t, nil
		}
	}
	return TAT{}, tooLarge(rate, period, burst)
}

// NewTATAt is NewTAT deciding at a resolution of res (a positive
// duration), and whether the span fits at it: the decisions of a store
// whose own arithmetic holds a limit only at a coarser resolution than
// NewTAT's, as the Redis script's doubles do.
func NewTATAt(rate int64, period time.Duration, burst int64, res time.Duration) (TAT, bool) {
	return newTAT(rate, period, burst, int64(res))
}

// newTAT is NewTATAt with res in ns.
func newTAT(rate int64, period time.Duration, burst, res int64) (TAT, bool) {
	t := TAT{burst: burst, p: 1, res: res}
	if rate > 0 {
		// Period/Rate ns is (Period/g)/(Rate/g) ns, and (p/h)/(q·res/h)
		// quanta with h = gcd(p, res): in lowest terms, as gcd(p, q) = 1.
		g := gcd(int64(period), rate)
		p, q := int64(period)/g, rate/g
		h := gcd(p, res)
		qr, ok := mulOK(q, res/h)
		if !ok {
			return TAT{}, false
		}
		t.p, t.q = uint64(p/h), uint64(qr)
	}
	span, ok := mulOK(burst, int64(t.p))
	if !ok || span > maxSpan {
		return TAT{}, false
	}
	t.span = uint64(span)
	t.pinv = ^uint64(0) / t.p
	return t, true
}

// Resolution is the quantum of time the bucket decides at: 1ns but for a
// limit whose span does not fit at it (see TAT).
func (t *TAT) Resolution() time.Duration { return time.Duration(t.res) }

// Charged returns t charging requests by c. NewTAT's arithmetic charges
// by ChargeGate.
func (t TAT) Charged(c Charge) TAT {
	t.charge = c
	return t
}

// divP is x/p by multiplying with the reciprocal. The estimate is x/p or
// one less (for x < 2^63 the reciprocal's error stays under one unit), so
// one correction makes it exact. A hardware divide costs several times as
// much, and every decision reports Remaining.
func (t *TAT) divP(x uint64) uint64 {
	q, _ := bits.Mul64(x, t.pinv)
	if x-q*t.p >= t.p {
		q++
	}
	return q
}

// ticks is now (Unix ns) in ticks: now·q, at a coarse resolution the
// whole quanta of now times q.
func (t *TAT) ticks(now int64) uint64 {
	if t.res == 1 {
		return uint64(now) * t.q
	}
	return uint64(floorDiv(now, t.res)) * t.q
}

// align is now rounded down to a whole quantum.
func (t *TAT) align(now int64) int64 {
	if t.res == 1 {
		return now
	}
	return floorDiv(now, t.res) * t.res
}

// wait is how long after now a debt of x ticks takes to drain: ⌈x/q⌉ ns,
// and at a coarse resolution ⌈x/q⌉ quanta from now's quantum, so that the
// time it names is the first that the arithmetic reads as drained. For the
// common q = 1 (the rate divides its period) it is x itself, with no divide.
func (t *TAT) wait(x uint64, now int64) time.Duration {
	if t.res != 1 {
		c := ceilDiv(x, t.q)
		off := now - t.align(now)
		if int64(c) > int64(Never)/t.res {
			return Never
		}
		return time.Duration(int64(c)*t.res - off)
	}
	if t.q == 1 {
		if x >= uint64(Never) {
			return Never
		}
		return time.Duration(x)
	}
	return ceilDiv(x, t.q)
}

// quanta is a duration of x quanta in ns, saturated at Never.
func (t *TAT) quanta(x time.Duration) time.Duration {
	if x > Never/time.Duration(t.res) {
		return Never
	}
	return x * time.Duration(t.res)
}

// Burst is the capacity in units.
func (t *TAT) Burst() int64 { return t.burst }

// debt reads the state at nowq: 0 for a full (or never used) bucket. A debt
// above span is a usage rule's debt, or a time earlier than one already
// seen; the latter is kept as is, so a clock that goes back is charged as
// if it had not, or more strictly, and mints nothing.
func (t *TAT) debt(x, nowq uint64) uint64 {
	if x == 0 {
		return 0
	}
	d := int64(x - origin - nowq)
	if d <= 0 {
		return 0
	}
	return uint64(d)
}

// Step decides a request of cost n at now (Unix ns) against state x and
// returns the decision and the next state. The next state equals x when
// nothing changed but the passage of time.
func (t *TAT) Step(x uint64, now int64, n int64) (Decision, uint64) {
	next, debt, ok := t.Take(x, now, n)
	return t.Decide(debt, n, ok, now), next
}

// Allow is Step on a state kept in one atomic word, for a holder with no
// lock of its own (the single-key buckets, the memory store's keys): it
// takes n units at now by compare-and-swap, redoing Take when it loses a
// race, and returns Decide's numbers (see Fields for why not a Decision).
func (t *TAT) Allow(x *atomic.Uint64, now int64, n int64) (allowed bool, remaining int64, retry, reset time.Duration) {
	for {
		old := x.Load()
		next, debt, ok := t.Take(old, now, n)
		if next == old || x.CompareAndSwap(old, next) {
			remaining, retry, reset = t.Fields(debt, n, ok, now)
			return ok, remaining, retry, reset
		}
	}
}

// Take is the part of Step a compare-and-swap loop must redo when it
// loses a race: whether n units fit at now, the next state, and the debt
// after the decision. Decide turns the debt into a Decision once, after
// the swap.
func (t *TAT) Take(x uint64, now int64, n int64) (next, debt uint64, allowed bool) {
	nowq := t.ticks(now)
	debt = t.debt(x, nowq)
	switch {
	case n < 0:
	case n == 0:
		allowed = t.peek(debt) // nothing to take, even from an empty bucket
	case n <= t.burst:
		// debt < 2^63 and n·p <= span <= 2^62: the sum does not overflow.
		if need := uint64(n) * t.p; debt+need <= t.span {
			allowed = true
			debt += need
		}
	}
	// Usage is recorded though it does not fit. The charge is tested
	// first, so that a gate rule's path has no branch on the decision.
	if t.charge != ChargeGate && !allowed && n > 0 {
		debt = t.owe(debt, n)
	}
	// Even a peek at an unused bucket records now: a later request stamped
	// earlier must be charged as if at now, or it would be given back the
	// refill between its time and now.
	next = nowq + debt + origin
	if next == 0 && debt != 0 {
		next = 1 // see origin
	}
	return next, debt, allowed
}

// peek is whether a check of cost 0 is allowed at debt: always for a gate
// rule; for a usage rule when a unit is left; for a count rule when the
// bucket is not below empty.
func (t *TAT) peek(debt uint64) bool {
	switch t.charge {
	case ChargeGate:
		return true
	case ChargeUsage:
		return debt+t.p <= t.span
	}
	return debt <= t.span
}

// owe is debt with n more units recorded, n > 0, capped at top. A debt
// already at or over top (a clock gone back) is kept. Rate 0 records no
// debt: nothing would ever drain it.
func (t *TAT) owe(debt uint64, n int64) uint64 {
	top := t.top()
	switch {
	case t.q == 0 || debt >= top:
		return debt
	case uint64(n) > 2*uint64(t.burst): // n·p > two spans >= top
		return top
	}
	// debt < top <= 2^62 and n·p <= two spans <= 2^63: no overflow.
	return min(debt+uint64(n)*t.p, top)
}

// top is the most debt usage may record: two spans, a level of -Burst,
// but never past maxSpan, so that a debt keeps the room a span has below
// 2^63 for a clock that goes back (only limits whose span is over 2^61
// ticks, refilling in over 73 years at one tick a ns, are capped lower).
func (t *TAT) top() uint64 { return min(2*t.span, maxSpan) }

// Decide is the Decision for a request of cost n at now that Take
// answered with debt and allowed.
func (t *TAT) Decide(debt uint64, n int64, allowed bool, now int64) Decision {
	remaining, retry, reset := t.Fields(debt, n, allowed, now)
	return Decision{Allowed: allowed, Limit: t.burst, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// Fields are Decide's numbers, as three results rather than a struct: Go
// keeps a struct of five fields in memory, and on the lock-free path the
// copies of it cost more than the decision itself. Callers build their
// Decision once, from these.
func (t *TAT) Fields(debt uint64, n int64, allowed bool, now int64) (remaining int64, retry, reset time.Duration) {
	switch {
	case allowed:
	case n < 0 || n > t.burst || t.q == 0:
		retry = Never
	default:
		need := uint64(n) * t.p
		if n == 0 && t.charge == ChargeUsage {
			need = t.p // a usage rule's cost-0 check waits for a unit
		}
		retry = t.wait(debt+need-t.span, now)
	}
	if debt <= t.span {
		remaining = int64(t.divP(t.span - debt))
	}
	switch {
	case debt == 0:
	case t.q == 0:
		reset = Never
	default:
		reset = t.wait(debt, now)
	}
	return remaining, retry, reset
}

// Idle reports whether state x is back to a full bucket at now: a key in
// this state can be forgotten without changing any later decision.
func (t *TAT) Idle(x uint64, now int64) bool {
	return t.debt(x, t.ticks(now)) == 0
}

// Release is the leaky queue's step: it admits n units at now if the queue
// has room, and says when the first of them leaves (now + wait). A full
// queue refuses at once, with the time after which it would have room.
func (t *TAT) Release(x uint64, now int64, n int64) (d Decision, wait time.Duration, next uint64) {
	d, next = t.Step(x, now, n)
	if d.Allowed && t.q != 0 {
		// The request's units sit behind the debt already there; it leaves
		// when that has drained.
		if debt := t.debt(x, t.ticks(now)); debt != 0 {
			wait = t.wait(debt, now)
		}
	}
	return d, wait, next
}

// Refund gives back n units charged by a reservation at or before now that
// will not be used, if no later charge was made on top of it (x is still
// the state that reservation left, end). It reports whether it did.
func (t *TAT) Refund(x, end uint64, n int64) (uint64, bool) {
	if x != end || n <= 0 {
		return x, false
	}
	next := x - uint64(n)*t.p
	if next == 0 {
		next = 1 // see origin
	}
	return next, true
}

// Horizon is how long a state may go untouched and still be read exactly:
// 2^62 ticks. Past it, tick differences wrap. A holder that cannot promise
// to touch or drop every state within the horizon uses Shift.
func (t *TAT) Horizon() time.Duration {
	if t.q == 0 {
		return Never
	}
	return t.quanta(time.Duration(maxSpan / t.q))
}

// DrainTime is how long the most debt usage may record takes to drain,
// rounded up: twice an empty bucket's refill, about. A state untouched for that long is
// full, whatever it says and however the rule is charged (rules charged
// differently may share a state).
func (t *TAT) DrainTime() time.Duration {
	if t.q == 0 {
		return Never
	}
	return t.quanta(ceilDiv(t.top(), t.q))
}

// Shift re-expresses state x, kept relative to a time origin, relative to
// an origin ns nanoseconds later: x - ns·q ticks (ns/res quanta of q
// ticks; ns is a whole number of quanta). It lets a holder keep its
// times small and so never reach the horizon.
func (t *TAT) Shift(x uint64, ns int64) uint64 {
	if x == 0 {
		return 0
	}
	next := x - uint64(ns/t.res)*t.q
	if next == 0 {
		next = 1 // see origin
	}
	return next
}

// wideHorizon is the least horizon for which a holder may keep the bare
// uint64 state without promising to touch or drop it in time.
const wideHorizon = 10 * 365 * 24 * time.Hour

// NeedsWide reports whether the tick horizon is short enough (under ten
// years: odd high rates such as 12347 per second) that a state which may
// sit untouched should be kept as a Wide rather than a bare uint64.
func (t *TAT) NeedsWide() bool { return t.Horizon() < wideHorizon }

// Wide is a bucket state that stays exact however long it sits untouched:
// the uint64 state X counts ticks from its own Origin, which moves forward
// before times grow near the horizon, and Last, the latest time seen,
// lets a clock that goes back be read exactly as that time. It needs its
// holder's lock; the bare uint64 state does not.
type Wide struct {
	Origin int64 // Unix ns that X's ticks count from
	Last   int64 // the latest time seen, Unix ns
	Used   bool
	X      uint64
}

// Enter prepares s for a step at now (Unix ns): it reads a time before
// Last as Last, forgets a state untouched for a whole DrainTime (the bucket
// is full), moves the origin when now is a quarter horizon past it, records
// now, and returns now relative to the origin, the time to pass Step or
// Release with s.X. The origin is a whole quantum, so that the relative
// times round as the absolute ones do.
func (t *TAT) Enter(s *Wide, now int64) int64 {
	if s.Used && now < s.Last {
		now = s.Last
	}
	// Differences in uint64: now >= Last >= Origin, and an int64 difference
	// of two hostile times could overflow.
	switch {
	case !s.Used || uint64(now)-uint64(s.Last) >= uint64(t.DrainTime()):
		s.X, s.Origin = 0, t.align(now)
	case uint64(now)-uint64(s.Origin) > uint64(t.Horizon()/4):
		o := t.align(now)
		s.X = t.Shift(s.X, o-s.Origin)
		s.Origin = o
	}
	s.Last, s.Used = now, true
	return now - s.Origin
}

// WideIdle reports whether s no longer affects any decision at now or
// later. A time before Last is never idle: the state still holds it back.
func (t *TAT) WideIdle(s *Wide, now int64) bool {
	switch {
	case !s.Used:
		return true
	case now < s.Last:
		return false
	case uint64(now)-uint64(s.Last) >= uint64(t.DrainTime()):
		return true
	}
	return t.Idle(s.X, now-s.Origin)
}
