package sluice

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// SlidingLog keeps the time of every allowed request of the last Period in
// a ring buffer of Rate cells (package ring), and allows n units iff the
// units in (now - Period, now] plus n are at most Rate. It is exact — the
// window slides continuously, with no burst at a boundary — and pays for it
// with O(Rate) memory, allocated once. Rate is limited to 2^20 per window.
// Burst is ignored.
//
// It is safe for concurrent use.
type SlidingLog struct {
	mu sync.Mutex
	l  algo.Log
	s  algo.LogState
}

// NewSlidingLog returns a sliding window log for l.
func NewSlidingLog(l Limit) (*SlidingLog, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	lg, err := algo.NewLog(l.Rate, l.Period)
	if err != nil {
		return nil, fmt.Errorf("sluice: %w", err)
	}
	return &SlidingLog{l: lg, s: lg.NewState()}, nil
}

// AllowN decides a request of cost n at now. See Algorithm.
func (s *SlidingLog) AllowN(now time.Time, n int64) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return decision(s.l.Step(&s.s, now.UnixNano(), n))
}
