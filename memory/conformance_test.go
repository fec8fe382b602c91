package memory

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storetest"
)

func newStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		New: func(t *testing.T) sluice.Store { return newStore(t) },
	})
}

// TestConformanceOneShard runs the suite with every key in one shard, so
// that every multi-check and every concurrent call meet on one lock and
// one index; 64 keys are room for the suite's keys, which eviction would
// forget.
func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, storetest.Config{
		New: func(t *testing.T) sluice.Store { return newStore(t, WithShards(1), WithMaxKeys(64)) },
	})
}
