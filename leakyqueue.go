package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrQueueFull is returned by LeakyQueue.Wait when the queue has no room:
// the request is refused at once rather than queued.
var ErrQueueFull = errors.New("sluice: leaky queue full")

// ErrInvalidCost is returned by LeakyQueue.Wait for a negative cost.
var ErrInvalidCost = errors.New("sluice: invalid cost")

// ErrWouldExceedDeadline is returned by LeakyQueue.Wait when the request
// would leave the queue only after the context's deadline.
var ErrWouldExceedDeadline = errors.New("sluice: release would exceed context deadline")

// LeakyQueue is the leaky bucket as a queue: a shaper. Requests wait in a
// queue of Burst units (Rate when Burst is 0) and leave evenly spaced,
// Period/Rate apart; past the queue's size they are refused at once. The
// queue counts the request leaving now, so an idle queue admits Burst
// requests at one instant: the first leaves at once, the last Burst-1
// intervals later.
//
// Reserve is the time-as-parameter core; Wait blocks on top of it. It is
// safe for concurrent use and lock-free.
type LeakyQueue struct {
	b     bucket
	clock Clock
}

// QueueOption configures a LeakyQueue: WithClock.
type QueueOption interface{ applyQueue(*LeakyQueue) }

// NewLeakyQueue returns an empty queue for l.
func NewLeakyQueue(l Limit, opts ...QueueOption) (*LeakyQueue, error) {
	q := &LeakyQueue{clock: SystemClock}
	if err := q.b.init(l); err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.applyQueue(q)
	}
	return q, nil
}

// Reserve queues a request of cost n at now and returns when it leaves the
// queue. If the queue has no room, d.Allowed is false, nothing is queued,
// and d.RetryAfter says when there will be room.
func (q *LeakyQueue) Reserve(now time.Time, n int64) (release time.Time, d Decision) {
	d, wait, _ := q.reserve(now, n)
	if !d.Allowed {
		return time.Time{}, d
	}
	return now.Add(wait), d
}

func (q *LeakyQueue) reserve(now time.Time, n int64) (Decision, time.Duration, uint64) {
	return q.b.reserve(now, n)
}

// Wait queues a request of cost n and blocks until it leaves the queue or
// ctx is done. It returns ErrQueueFull (wrapped, with the wait until there
// is room) when the queue is full, ErrWouldExceedDeadline when the request
// would leave after ctx's deadline, and ctx's error when ctx ends first. A
// request that does not go through gives its place back when no later
// request has queued behind it.
func (q *LeakyQueue) Wait(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case n < 0:
		return fmt.Errorf("%w: cost %d is negative", ErrInvalidCost, n)
	case n == 0:
		return nil
	}
	now := q.clock.Now()
	d, wait, end := q.reserve(now, n)
	if !d.Allowed && d.RetryAfter == Never {
		return fmt.Errorf("%w: cost %d exceeds the queue's capacity %d", ErrQueueFull, n, d.Limit)
	}
	if !d.Allowed {
		return fmt.Errorf("%w: room in %v", ErrQueueFull, d.RetryAfter)
	}
	if wait <= 0 {
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(now.Add(wait)) {
		q.refund(end, n)
		return ErrWouldExceedDeadline
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		q.refund(end, n)
		return ctx.Err()
	}
}

func (q *LeakyQueue) refund(end uint64, n int64) { q.b.refund(end, n) }
