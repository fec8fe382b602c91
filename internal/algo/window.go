package algo

import "time"

// Window is the fixed, aligned window shared by the fixed window and the
// sliding window counter: [k·Period, (k+1)·Period) counted from the Unix
// epoch.
type Window struct {
	rate   int64
	period int64
}

// NewWindow prepares a window of rate units per period; the caller has
// validated both.
func NewWindow(rate int64, period time.Duration) Window {
	return Window{rate: rate, period: int64(period)}
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

// Fixed decides n units at now: allowed iff count+n <= rate.
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
	switch {
	case n < 0 || n > w.rate:
		d.RetryAfter = Never
	case n <= w.rate-s.Count: // not Count+n <= rate, which overflows near MaxInt64
		d.Allowed = true
		s.Count += n
	default:
		d.RetryAfter = time.Duration(w.period - off)
	}
	d.Remaining = w.rate - s.Count
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
// All of it is compared in 128-bit integers, multiplied through by P.
func (w *Window) Counter(s *CounterState, now int64, n int64) Decision {
	if s.Used && now < s.Last {
		now = s.Last
	}
	k, off := w.locate(now)
	s.roll(k)
	s.Last, s.Used = now, true
	d := Decision{Limit: w.rate}
	switch {
	case n < 0 || n > w.rate:
		d.RetryAfter = Never
	case n == 0 || w.fits(s.Prev, s.Curr, off, n):
		d.Allowed = true
		s.Curr += n
	default:
		d.RetryAfter = w.counterRetry(s.Prev, s.Curr, off, n)
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
	m := w.rate - curr - n + 1
	if m <= 0 {
		return false
	}
	return less128(mul128(uint64(prev), uint64(w.period-off)), mul128(uint64(m), uint64(w.period)))
}

// firstFit returns the least offset in a window whose previous window held
// prev and whose current holds curr at which n units fit, or period when no
// offset in that window does. Over a window the estimate only falls, so
// the least offset is the one that makes RetryAfter tight.
func (w *Window) firstFit(prev, curr, n int64) int64 {
	m := w.rate - curr - n + 1
	if m <= 0 {
		return w.period
	}
	if prev == 0 {
		return 0
	}
	// Largest r = P-off with prev·r < m·P: r = ⌊(m·P - 1)/prev⌋.
	x := sub128(mul128(uint64(m), uint64(w.period)), u128{lo: 1})
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
