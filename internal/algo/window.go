package algo

import (
	"math"
	"time"
)

// Window is the fixed, aligned window shared by the fixed window and the
// sliding window counter: [k·Period, (k+1)·Period) counted from the Unix
// epoch.
//
// A rule charged by usage (ChargeUsage, ChargeCount) records a request
// that does not fit all the same: the window's count goes past rate, up to
// twice rate, and the window's end (for the counter, the next window's)
// clears it.
type Window struct {
	rate   int64
	period int64
	charge Charge
}

// NewWindow prepares a window of rate units per period, charged by
// ChargeGate; the caller has validated both.
func NewWindow(rate int64, period time.Duration) Window {
	return Window{rate: rate, period: int64(period)}
}

// Charged returns w charging requests by c.
func (w Window) Charged(c Charge) Window {
	w.charge = c
	return w
}

// need is what a check of cost n must find room for: n, but one unit for
// a usage rule's cost-0 check.
func need(c Charge, n int64) int64 {
	if n == 0 && c == ChargeUsage {
		return 1
	}
	return n
}

// owe is count with n more units recorded, n > 0, capped at twice rate
// (saturated at MaxInt64). A count already over the cap is kept. Rate 0
// records nothing: every request is over it.
func owe(count, n, rate int64) int64 {
	top := int64(math.MaxInt64)
	if rate <= math.MaxInt64/2 {
		top = 2 * rate
	}
	switch {
	case rate == 0 || count >= top:
		return count
	case n > top-count:
		return top
	}
	return count + n
}

// locate returns the index of the window holding now and how far into it
// now is.
func (w *Window) locate(now int64) (k, off int64) {
	k = floorDiv(now, w.period)
	off = now - k*w.period
	if off < 0 || off >= w.period { // only for times near the int64 limits
		off = ((now % w.period) + w.period) % w.period
	}
	return k, off
}

// FixedState is one key's fixed window.
type FixedState struct {
	Window int64 // index of the window Count belongs to
	Count  int64
	Last   int64 // latest time seen, Unix ns: the clock never goes back
	Used   bool
}

// Fixed decides n units at now: allowed iff count+n <= rate. A usage
// rule records n whether it is allowed or not; its cost-0 check is allowed
// iff a unit is left, a count rule's iff count <= rate.
func (w *Window) Fixed(s *FixedState, now int64, n int64) Decision {
	if s.Used && now < s.Last {
		now = s.Last
	}
	k, off := w.locate(now)
	if !s.Used || k != s.Window {
		s.Window, s.Count = k, 0
	}
	s.Last, s.Used = now, true
	d := Decision{Limit: w.rate}
	m := need(w.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	// m <= rate-Count, not Count+m <= rate, which overflows near MaxInt64.
	// A gate rule's peek is allowed even when a usage rule of the same
	// limit put the window in debt.
	case m <= w.rate && m <= w.rate-s.Count, n == 0 && w.charge == ChargeGate:
		d.Allowed = true
		s.Count += n
	default:
		if w.charge != ChargeGate && n > 0 {
			s.Count = owe(s.Count, n, w.rate)
		}
		d.RetryAfter = time.Duration(w.period - off)
		if m > w.rate {
			d.RetryAfter = Never
		}
	}
	d.Remaining = max(w.rate-s.Count, 0)
	if s.Count > 0 {
		d.ResetAfter = time.Duration(w.period - off)
	}
	return d
}

// FixedIdle reports whether the state no longer affects any decision.
func (w *Window) FixedIdle(s *FixedState, now int64) bool {
	k, _ := w.locate(now)
	return s.Count == 0 || k != s.Window
}

// CounterState is one key's sliding window counter: the counts of the
// current aligned window and the one before it.
type CounterState struct {
	Window int64
	Prev   int64
	Curr   int64
	Last   int64
	Used   bool
}

// roll moves the state to window k.
func (s *CounterState) roll(k int64) {
	switch {
	case !s.Used:
		s.Prev, s.Curr = 0, 0
	case k == s.Window:
		return
	case k == s.Window+1:
		s.Prev, s.Curr = s.Curr, 0
	default:
		s.Prev, s.Curr = 0, 0
	}
	s.Window = k
}

// Counter decides n units at now. With off the time into the current
// window, the estimate is prev·(P-off)/P + curr, and n units are allowed iff
// estimate + n - 1 < rate (for n = 1, estimate < rate, as Cloudflare does).
// All of it is compared in 128-bit integers, multiplied through by P. A
// usage rule records n in curr whether it is allowed or not; its cost-0
// check is allowed iff one unit would be, a count rule's iff
// estimate - 1 < rate.
func (w *Window) Counter(s *CounterState, now int64, n int64) Decision {
	if s.Used && now < s.Last {
		now = s.Last
	}
	k, off := w.locate(now)
	s.roll(k)
	s.Last, s.Used = now, true
	d := Decision{Limit: w.rate}
	m := need(w.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && w.charge == ChargeGate, m <= w.rate && w.fits(s.Prev, s.Curr, off, m):
		d.Allowed = true
		s.Curr += n
	default:
		if w.charge != ChargeGate && n > 0 {
			s.Curr = owe(s.Curr, n, w.rate)
		}
		d.RetryAfter = Never
		if m <= w.rate {
			d.RetryAfter = w.counterRetry(s.Prev, s.Curr, off, m)
		}
	}
	d.Remaining = w.counterRemaining(s.Prev, s.Curr, off)
	switch {
	case s.Curr > 0:
		d.ResetAfter = addSat(w.period-off, w.period)
	case s.Prev > 0:
		d.ResetAfter = time.Duration(w.period - off)
	}
	return d
}

// fits reports prev·(P-off) < (rate-curr-n+1)·P.
func (w *Window) fits(prev, curr, off, n int64) bool {
	m := w.room(curr, n)
	if m == 0 {
		return false
	}
	return less128(mul128(uint64(prev), uint64(w.period-off)), mul128(m, uint64(w.period)))
}

// room is rate-curr-n+1, or 0 when that is not positive. It is a uint64
// because it reaches 2^63 (rate MaxInt64, a count rule's cost 0), and
// computed so that it never overflows: curr may be up to MaxInt64.
func (w *Window) room(curr, n int64) uint64 {
	r := w.rate - curr
	if r < n {
		return 0
	}
	return uint64(r-n) + 1
}

// firstFit returns the least offset in a window whose previous window held
// prev and whose current holds curr at which n units fit, or period when no
// offset in that window does. Over a window the estimate only falls, so
// the least offset is the one that makes RetryAfter tight.
func (w *Window) firstFit(prev, curr, n int64) int64 {
	m := w.room(curr, n)
	if m == 0 {
		return w.period
	}
	if prev == 0 {
		return 0
	}
	// Largest r = P-off with prev·r < m·P: r = ⌊(m·P - 1)/prev⌋.
	x := sub128(mul128(m, uint64(w.period)), u128{lo: 1})
	r, ok := div128(x, uint64(prev))
	if !ok || r >= uint64(w.period) {
		return 0
	}
	return w.period - int64(r)
}

func (w *Window) counterRetry(prev, curr, off, n int64) time.Duration {
	if at := w.firstFit(prev, curr, n); at < w.period {
		return time.Duration(at - off)
	}
	// In the next window curr becomes prev; in the one after, both are 0.
	if at := w.firstFit(curr, 0, n); at < w.period {
		return addSat(w.period-off, at)
	}
	return addSat(w.period-off, w.period)
}

// addSat returns a+b as a duration, or Never when it overflows: a window
// two periods long need not fit in an int64. a, b >= 0.
func addSat(a, b int64) time.Duration {
	if a > int64(Never)-b {
		return Never
	}
	return time.Duration(a + b)
}

// counterRemaining is ⌈rate - estimate⌉, at least 0: the most units that
// would be allowed next.
func (w *Window) counterRemaining(prev, curr, off int64) int64 {
	if curr >= w.rate {
		return 0
	}
	a := mul128(uint64(w.rate-curr), uint64(w.period))
	b := mul128(uint64(prev), uint64(w.period-off))
	if !less128(b, a) {
		return 0
	}
	x := sub128(a, b)
	q, _ := div128(add128(x, u128{lo: uint64(w.period) - 1}), uint64(w.period))
	return int64(q)
}

// CounterIdle reports whether the state no longer affects any decision.
func (w *Window) CounterIdle(s *CounterState, now int64) bool {
	k, _ := w.locate(now)
	return k > s.Window+1 || (k == s.Window+1 && s.Curr == 0) || (k == s.Window && s.Prev == 0 && s.Curr == 0)
}
