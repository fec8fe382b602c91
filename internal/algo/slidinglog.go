package algo

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/ring"
)

// MaxLogRate bounds the sliding log's ring: it keeps one cell per unit of
// Rate, allocated up front, and a limit above this many units per window is
// better served by the sliding window counter.
const MaxLogRate = 1 << 20

// Entry is one allowed request in the log: when, and how many units.
type Entry struct {
	At int64
	N  int64
}

// LogState is one key's sliding log: the allowed requests of the last
// period, oldest first, in a ring of Rate cells. Each entry holds at least
// one unit. A gate rule pushes only while fewer than Rate units are live,
// so the ring is never full when it pushes; a usage rule, whose live units
// go up to twice Rate, adds to the newest entry when the ring is full (see
// Log.record): the ring never overwrites a live entry.
type LogState struct {
	Ring  *ring.Buffer[Entry]
	Count int64 // units in Ring
	Last  int64
	Used  bool
}

// Log is the sliding window log of rate units per period, over the window
// (now-period, now].
//
// A rule charged by usage (ChargeUsage, ChargeCount) records a request
// that does not fit all the same: the log's live units go past rate, up
// to twice rate, and leave it as their entries do.
type Log struct {
	rate   int64
	period int64
	charge Charge
}

// Charged returns l charging requests by c.
func (l Log) Charged(c Charge) Log {
	l.charge = c
	return l
}

// NewLog prepares a sliding log, charged by ChargeGate; the caller has
// validated rate and period.
func NewLog(rate int64, period time.Duration) (Log, error) {
	if rate > MaxLogRate {
		return Log{}, fmt.Errorf("%w: the sliding log keeps a cell per unit and allows at most %d per window, not %d; use the sliding window counter", ErrTooLarge, MaxLogRate, rate)
	}
	return Log{rate: rate, period: int64(period)}, nil
}

// NewState allocates a key's ring, once.
func (l *Log) NewState() LogState {
	return LogState{Ring: ring.New[Entry](int(l.rate))}
}

// evict drops the entries at or before now-period.
func (l *Log) evict(s *LogState, now int64) {
	for {
		e, ok := s.Ring.PeekOldest()
		if !ok || since(now, e.At) < uint64(l.period) {
			return
		}
		s.Ring.Pop()
		s.Count -= e.N
	}
}

// Step decides n units at now: allowed iff the units in (now-period, now]
// plus n are at most rate. A usage rule records n whether it is allowed or
// not; its cost-0 check is allowed iff a unit is left, a count rule's iff
// the live units are at most rate.
func (l *Log) Step(s *LogState, now int64, n int64) Decision {
	if s.Used && now < s.Last {
		now = s.Last
	}
	s.Last, s.Used = now, true
	l.evict(s, now)
	d := Decision{Limit: l.rate}
	m := need(l.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && l.charge == ChargeGate:
		d.Allowed = true
	case m <= l.rate && s.Count+m <= l.rate: // Count < 2^21: no overflow
		d.Allowed = true
		if n > 0 {
			s.Ring.Push(Entry{At: now, N: n})
			s.Count += n
		}
	default:
		if l.charge != ChargeGate && n > 0 {
			l.record(s, now, n)
		}
		if m > l.rate {
			d.RetryAfter = Never
			break
		}
		// Wait for the oldest entries to leave until m units fit.
		over := s.Count + m - l.rate
		for e := range s.Ring.All() {
			over -= e.N
			if over <= 0 {
				d.RetryAfter = time.Duration(e.At + l.period - now)
				break
			}
		}
	}
	d.Remaining = max(l.rate-s.Count, 0)
	if e, ok := s.Ring.PeekNewest(); ok {
		d.ResetAfter = time.Duration(e.At + l.period - now)
	}
	return d
}

// record adds n units at now that do not fit, up to twice rate live
// units, for a usage rule. A full ring (rate entries, which holds at least
// rate units) takes them into its newest entry, which moves to now: its
// units then leave the window later than they would have, so the log
// never counts fewer units than it was given, only keeps some a little
// longer. A rule of rate 0 records nothing.
func (l *Log) record(s *LogState, now int64, n int64) {
	add := min(n, 2*l.rate-s.Count)
	if add <= 0 {
		return
	}
	if s.Ring.Len() < s.Ring.Cap() {
		s.Ring.Push(Entry{At: now, N: add})
	} else if e, ok := s.Ring.PeekNewest(); ok {
		s.Ring.SetNewest(Entry{At: now, N: e.N + add})
	} else {
		return // a ring of no cells holds nothing
	}
	s.Count += add
}

// Idle reports whether the state no longer affects any decision.
func (l *Log) Idle(s *LogState, now int64) bool {
	e, ok := s.Ring.PeekNewest()
	return !ok || since(now, e.At) >= uint64(l.period)
}

// Denies reports whether a request of one unit at now would be denied,
// changing nothing: the units still in the window leave none. It reads
// the entries that have left the window without dropping them, so that a
// later request stamped before now still finds them.
func (l *Log) Denies(s *LogState, now int64) bool {
	if s.Used && now < s.Last {
		now = s.Last
	}
	live := s.Count
	for e := range s.Ring.All() {
		if since(now, e.At) < uint64(l.period) {
			break
		}
		live -= e.N
	}
	return live >= l.rate
}

// since is now-at, or 0 if now is not after at. It is computed in uint64
// because the difference of two int64 times can overflow an int64.
func since(now, at int64) uint64 {
	if now <= at {
		return 0
	}
	return uint64(now) - uint64(at)
}
