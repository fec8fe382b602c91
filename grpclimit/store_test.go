package grpclimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/memory"
)

// flakyStore is the memory store with a switch to make every Take fail, as
// a store that lost its backend does.
type flakyStore struct {
	sluice.Store
	mu  sync.Mutex
	err error
}

func newStore(t *testing.T) *flakyStore {
	t.Helper()
	m, err := memory.New(memory.WithMaxKeys(1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &flakyStore{Store: m}
}

func (s *flakyStore) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *flakyStore) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Take(ctx, now, checks, out)
}

// fakeClock is a clock the test moves by hand.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock {
	return testclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}
