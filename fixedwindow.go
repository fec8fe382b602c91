package sluice

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// FixedWindow counts requests in windows [k·Period, (k+1)·Period) aligned
// to the Unix epoch. A request of cost n is allowed iff count + n <= Rate.
// It is the cheapest algorithm and the least exact: around a boundary up to
// 2·Rate can pass in a short time (100 at 12:00:59 and 100 more at
// 12:01:00). Burst is ignored.
//
// It is safe for concurrent use.
type FixedWindow struct {
	mu sync.Mutex
	w  algo.Window
	s  algo.FixedState
}

// NewFixedWindow returns a fixed window limiter for l.
func NewFixedWindow(l Limit) (*FixedWindow, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &FixedWindow{w: algo.NewWindow(l.Rate, l.Period)}, nil
}

// AllowN decides a request of cost n at now. See Algorithm.
func (f *FixedWindow) AllowN(now time.Time, n int64) Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	return decision(f.w.Fixed(&f.s, now.UnixNano(), n))
}
