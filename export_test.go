package sluice

import "time"

// NewSteadyClock is SystemClock's clock over the readings read gives, for
// the external tests to step the wall clock without waiting; its
// monotonic clock alone is read's too.
func NewSteadyClock(read func() (wall, mono int64, ok bool)) Clock {
	return newSteadyClock(read, func() int64 {
		_, mono, ok := read()
		if !ok {
			return -1
		}
		return mono
	})
}

// WallEvery is how much monotonic time a steady clock lets pass between
// two readings of the wall clock.
const WallEvery = time.Duration(wallEvery)

// MonoReading is SystemClock's reading of the monotonic clock alone:
// negative in a synctest bubble.
func MonoReading() int64 { return monoReading() }
