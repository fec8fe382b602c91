package sluice

import (
	"sync/atomic"
	"time"
)

// Clock tells the time. Only the edges of sluice read one (Wait, the keyed
// limiter, middleware, the server); tests pass a clock they drive.
type Clock interface {
	Now() time.Time
}

// SystemClock is the default clock of every edge: the wall clock at the
// start of the process plus the monotonic time elapsed since, following
// the wall clock when it steps forward but never when it steps back. Its
// times never go back, across goroutines too, and run at the monotonic
// clock's rate, so a wall clock stepped back an hour (by NTP, or by hand)
// denies nothing extra: the buckets keep refilling and the windows keep
// rolling. With time.Now, the memory store would take the earlier times
// as lag, and every key used in the last hour would be denied for up to
// an hour. Until the wall clock steps forward again, SystemClock then
// stays ahead of it by the step.
//
// A read costs the monotonic clock alone and two atomic loads, less than
// a time.Now, which reads the wall clock too. The wall clock is read
// by the first read a millisecond (wallEvery) or more of monotonic time
// after the last reading of it: a step forward is followed by then, and
// until then SystemClock is behind the wall clock by the step. (On Linux
// the monotonic clock is slewed with the wall clock, so nothing else
// comes between them.)
//
// Processes that must agree on the time, as those sharing a Redis store
// WithCallerTime do, want the wall clock itself: ClockFunc(time.Now).
// Inside a testing/synctest bubble, where time.Now has no monotonic
// reading, SystemClock is time.Now, as long as the bubble's time is
// before the process started, as it is unless a test sleeps the bubble
// (which starts in 2000) into the present (see monoReading).
var SystemClock Clock = newSteadyClock(systemReading, monoReading)

// monoBase is the origin of systemReading's monotonic time.
var monoBase = time.Now()

// systemReading reads the wall clock and the monotonic clock together;
// ok is false when there is no monotonic reading (in a synctest bubble).
// Go reads the wall clock first (on Linux), so a delay between the two
// readings makes the wall clock look behind, never ahead: it does not
// pass for a step forward.
func systemReading() (wall, mono int64, ok bool) {
	t := time.Now()
	// == compares the monotonic readings, and Round(0) strips t's.
	return t.UnixNano(), int64(t.Sub(monoBase)), t != t.Round(0)
}

// monoReading reads the monotonic clock alone, on systemReading's
// origin: time.Since reads no wall clock when its argument has a
// monotonic reading. In a synctest bubble, time.Since subtracts wall
// times, and the bubble's clock, which starts in 2000, is before the
// process began: the reading is negative, which says there is none. A
// bubble slept past the process's start would read as a monotonic time,
// and SystemClock would give the bubble's time plus the forward steps
// the offset has taken since the start.
func monoReading() int64 { return int64(time.Since(monoBase)) }

// wallEvery is how much monotonic time a steadyClock lets pass between
// two readings of the wall clock, in ns.
const wallEvery = int64(time.Millisecond)

// steadyClock is a Clock that reads mono + offset, where offset is the
// largest wall - mono read so far: the offset only grows, so the time
// never goes back, and it grows when, and only when, the wall clock is
// ahead, so forward steps are followed. The wall clock is read when the
// monotonic clock reaches next, which each reading moves wallEvery on.
// It is lock-free.
type steadyClock struct {
	read   func() (wall, mono int64, ok bool) // both clocks; the seam tests drive
	mono   func() int64                       // the monotonic clock alone; negative when there is none
	offset atomic.Int64
	next   atomic.Int64 // the monotonic time at which to read the wall clock again
}

func newSteadyClock(read func() (wall, mono int64, ok bool), mono func() int64) *steadyClock {
	c := &steadyClock{read: read, mono: mono}
	wall, m, _ := read()
	c.offset.Store(wall - m)
	c.next.Store(m + wallEvery)
	return c
}

// Now returns the steady time.
func (c *steadyClock) Now() time.Time {
	mono := c.mono()
	if mono < 0 || mono >= c.next.Load() {
		return c.sync()
	}
	// A call that begins after another ended reads a monotonic time and
	// an offset no smaller than the other's, so its time is no earlier.
	return time.Unix(0, mono+c.offset.Load())
}

// sync reads both clocks, raises the offset if the wall clock is ahead,
// and returns the steady time.
func (c *steadyClock) sync() time.Time {
	wall, mono, ok := c.read()
	if !ok {
		return time.Unix(0, wall)
	}
	off := c.offset.Load()
	if d := wall - mono; d > off {
		off = c.raise(off, d)
	}
	// Racing syncs may leave an earlier next: the next call syncs again.
	c.next.Store(mono + wallEvery)
	return time.Unix(0, mono+off)
}

// raise makes the offset at least d, from old, and returns it.
func (c *steadyClock) raise(old, d int64) int64 {
	for !c.offset.CompareAndSwap(old, d) {
		if old = c.offset.Load(); old >= d {
			return old
		}
	}
	return d
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }
