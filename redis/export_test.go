package redis

import (
	"context"
	"time"
)

// WithTTLSlack adds d to every TTL. Tests that drive the time with
// WithCallerTime faster or slower than Redis's clock use it so that a key
// does not expire, in Redis time, while its state still matters at the
// caller's time.
func WithTTLSlack(d time.Duration) Option {
	return func(o *options) error { o.ttlSlack = d; return nil }
}

// WithStoreClock decides at the caller's time, as WithCallerTime, but
// under the store's clock, as at Redis TIME: no decision at a time before
// the latest the store has seen, and a fixed window as a counter per
// window. Tests use it to hold that path to the algorithms at times they
// choose.
func WithStoreClock() Option {
	return func(o *options) error { o.callerTime, o.storeClock = true, true; return nil }
}

// CacheLen is the number of denials cached.
func (s *Store) CacheLen() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.len()
}

// HoldLeaders takes every leader slot of s's batcher, so that Takes queue
// until a test leads them; release gives the slots back.
func HoldLeaders(s *Store) (release func()) {
	s.batch.mu.Lock()
	held := leaders - s.batch.running
	s.batch.running = leaders
	s.batch.mu.Unlock()
	return func() {
		s.batch.mu.Lock()
		s.batch.running -= held
		s.batch.mu.Unlock()
	}
}

// Running is the number of leader slots in use in s's batcher.
func Running(s *Store) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.running
}

// Queued is the number of requests waiting in s's batcher.
func Queued(s *Store) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue) - s.batch.head
}

// LeadAs makes a caller with ctx, and no request of its own to speak of,
// lead the queued requests, as a waiter handed the queue does.
func LeadAs(ctx context.Context, s *Store) error {
	p := &pending{}
	p.deadline, _ = ctx.Deadline()
	s.batch.mu.Lock()
	s.batch.running++ // the slot lead gives back or hands on, as take takes it
	s.batch.mu.Unlock()
	_, err := s.batch.lead(ctx, p)
	return err
}
