package sluice

import "time"

// Clock tells the time. Only the edges of sluice read one (Wait, the keyed
// limiter, middleware, the server); tests pass a clock they drive.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, time.Now, with its monotonic reading.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }
