package sluice

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Limit is Rate events per Period. Burst is the capacity of the bucket
// algorithms and GCRA; 0 means Burst = Rate. The window algorithms ignore
// Burst.
//
// The zero Limit is invalid: Period must be positive.
type Limit struct {
	Rate   int64
	Period time.Duration
	Burst  int64
}

// Never is the RetryAfter of a request that can never be allowed: its cost
// is negative or exceeds the capacity.
const Never = time.Duration(math.MaxInt64)

// ErrInvalidLimit is wrapped by every error about a malformed Limit.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// ErrLimitTooLarge is wrapped by the error of a limit whose state cannot be
// kept exactly: a bucket that takes longer than 2^62 ticks to refill, or a
// sliding log of more than 2^20 units per window.
var ErrLimitTooLarge = errors.New("limit too large")

// PerSecond is n events per second, with Burst n.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute is n events per minute, with Burst n.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour is n events per hour, with Burst n.
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerDay is n events per 24 hours, with Burst n.
func PerDay(n int64) Limit { return Limit{Rate: n, Period: 24 * time.Hour} }

// Validate reports whether the limit is usable: Period > 0, Rate >= 0,
// Burst >= 0.
func (l Limit) Validate() error {
	switch {
	case l.Period <= 0:
		return fmt.Errorf("%w: period %v must be positive", ErrInvalidLimit, l.Period)
	case l.Rate < 0:
		return fmt.Errorf("%w: rate %d must not be negative", ErrInvalidLimit, l.Rate)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d must not be negative", ErrInvalidLimit, l.Burst)
	}
	return nil
}

// Capacity is the bucket's size: Burst, or Rate when Burst is 0.
func (l Limit) Capacity() int64 {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// String formats the limit as "10/1s" or "10/1s burst 20".
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%v", l.Rate, l.Period)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

// tat validates l and prepares the bucket arithmetic.
func (l Limit) tat() (algo.TAT, error) {
	if err := l.Validate(); err != nil {
		return algo.TAT{}, err
	}
	t, err := algo.NewTAT(l.Rate, l.Period, l.Capacity())
	if err != nil {
		return algo.TAT{}, fmt.Errorf("sluice: %w", err)
	}
	return t, nil
}
