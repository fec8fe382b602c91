package sluice

// NewSteadyClock is SystemClock's clock over the readings read gives, for
// the external tests to step the wall clock without waiting.
func NewSteadyClock(read func() (wall, mono int64, ok bool)) Clock { return newSteadyClock(read) }
