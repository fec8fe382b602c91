package sluice

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// SlidingCounter approximates a sliding window with two counters: the
// current aligned window's and the previous one's. With elapsed the time
// into the current window, it estimates
//
//	prev·(Period - elapsed)/Period + curr
//
// and allows n units iff estimate + n - 1 < Rate (for one unit: estimate <
// Rate, as Cloudflare does). It needs O(1) memory per key and assumes the
// previous window's requests were spread evenly, so it can be off by a
// little around a boundary. Burst is ignored.
//
// It is safe for concurrent use.
type SlidingCounter struct {
	mu sync.Mutex
	w  algo.Window
	s  algo.CounterState
}

// NewSlidingCounter returns a sliding window counter for l.
func NewSlidingCounter(l Limit) (*SlidingCounter, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &SlidingCounter{w: algo.NewWindow(l.Rate, l.Period)}, nil
}

// AllowN decides a request of cost n at now. See Algorithm.
func (c *SlidingCounter) AllowN(now time.Time, n int64) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return decision(c.w.Counter(&c.s, now.UnixNano(), n))
}
