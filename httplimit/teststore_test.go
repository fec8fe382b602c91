package httplimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/memory"
)

// t0 is an arbitrary start, not on a second boundary, so that rounding to
// seconds is exercised.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123_456_789, time.UTC)

// fakeClock is a clock the test moves by hand.
type fakeClock = testclock.Clock

func newClock(t time.Time) *fakeClock { return testclock.New(t) }

// testStore is the memory store, with what the tests need around it: it
// fails on demand, and records the keys it is asked about.
type testStore struct {
	*memory.Store
	mu     sync.Mutex
	err    error // when set, Take fails with it
	maxKey int   // longest key seen
	keys   map[string]bool
}

var _ sluice.Store = (*testStore)(nil)

// newStore returns a memory store with no background sweeper, closed when
// the test ends.
func newStore(tb testing.TB) *testStore {
	tb.Helper()
	s, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return &testStore{Store: s, keys: make(map[string]bool)}
}

func (s *testStore) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// seen returns the keys used so far.
func (s *testStore) seen() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]bool, len(s.keys))
	for k := range s.keys {
		m[k] = true
	}
	return m
}

// longest is the length of the longest key seen.
func (s *testStore) longest() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxKey
}

func (s *testStore) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	s.mu.Lock()
	err := s.err
	for _, c := range checks {
		s.maxKey = max(s.maxKey, len(c.Key))
		if len(s.keys) < 10_000 {
			s.keys[c.Key] = true
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Take(ctx, now, checks, out)
}

// nopStore allows everything without state: it measures the middleware
// alone.
type nopStore struct{}

func (nopStore) Take(_ context.Context, _ time.Time, checks []sluice.Check, out []sluice.Decision) error {
	for i, c := range checks {
		q := c.Rule.Quota()
		out[i] = sluice.Decision{Allowed: true, Limit: q, Remaining: q - c.Units(), ResetAfter: time.Second}
	}
	return nil
}
