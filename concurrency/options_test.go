package concurrency

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestNewOptions: a bad value of each option, alone or against the
// others, is an error wrapping ErrInvalidOption that names the option and
// the value.
func TestNewOptions(t *testing.T) {
	bad := []struct {
		name string
		opts []Option
		want string // in the error
	}{
		{"zero keys", []Option{WithMaxKeys(0)}, "max keys 0 must be positive"},
		{"negative keys", []Option{WithMaxKeys(-1)}, "max keys -1 must be positive"},
		{"most negative keys", []Option{WithMaxKeys(math.MinInt)}, "must be positive"},
		{"zero shards", []Option{WithShards(0)}, "shards 0 must be between 1 and 4096"},
		{"negative shards", []Option{WithShards(-1)}, "shards -1 must be between 1 and 4096"},
		{"too many shards", []Option{WithShards(maxShards + 1)}, "shards 4097 must be between 1 and 4096"},
		{"huge shards", []Option{WithShards(math.MaxInt)}, "must be between 1 and 4096"},
		{"negative sweep", []Option{WithSweepInterval(-time.Second)}, "sweep interval -1s must not be negative"},
		{"most negative sweep", []Option{WithSweepInterval(math.MinInt64)}, "must not be negative"},
		{"zero bytes", []Option{WithMaxBytes(0)}, "max bytes 0 must be at least 2048"},
		{"negative bytes", []Option{WithMaxBytes(-1)}, "max bytes -1 must be at least 2048"},
		{"under a shard's room", []Option{WithMaxBytes(minShardRoom - 1)}, "max bytes 2047 must be at least 2048"},
		{"shards without room", []Option{WithShards(8), WithMaxBytes(8 * minShardRoom / 2)}, "8 shards for 8192 bytes"},
		{"shards without keys", []Option{WithMaxKeys(4), WithShards(8)}, "8 shards for 4 keys"},
		{"bad after good", []Option{WithMaxKeys(10), WithMaxKeys(0)}, "max keys 0"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.opts...)
			if err == nil {
				l.Close()
				t.Fatalf("New(%s) = nil error, want one wrapping ErrInvalidOption", c.name)
			}
			if !errors.Is(err, ErrInvalidOption) || !strings.HasPrefix(err.Error(), "concurrency: invalid option: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%s) = %v, want an error wrapping ErrInvalidOption saying %q", c.name, err, c.want)
			}
			if l != nil {
				t.Errorf("New(%s) returned a Limiter beside its error", c.name)
			}
		})
	}

	l := newLimiter(t, nil, WithShards(3))
	if len(l.shards) != 4 {
		t.Errorf("WithShards(3): %d shards, want 4", len(l.shards))
	}
}

// TestOptionValues: the defaults are the documented ones, and the
// largest values an option takes make a Limiter that works.
func TestOptionValues(t *testing.T) {
	l := newLimiter(t)
	if l.bound.Hard != DefaultMaxKeys || l.bound.MaxBytes != DefaultMaxBytes {
		t.Errorf("New(): %d keys, %d bytes; want DefaultMaxKeys %d, DefaultMaxBytes %d", l.bound.Hard, l.bound.MaxBytes, DefaultMaxKeys, DefaultMaxBytes)
	}

	huge := map[string][]Option{
		"keys":   {WithMaxKeys(math.MaxInt)},
		"bytes":  {WithMaxBytes(math.MaxInt64)},
		"shards": {WithShards(maxShards)},
		"sweep":  {WithSweepInterval(math.MaxInt64)},
		"all":    {WithMaxKeys(math.MaxInt), WithMaxBytes(math.MaxInt64), WithShards(maxShards), WithSweepInterval(math.MaxInt64)},
		"least":  {WithMaxKeys(1), WithMaxBytes(minShardRoom), WithShards(1), WithSweepInterval(0)},
	}
	for name, opts := range huge {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, opts...)
			for i, want := range []bool{true, true, false} {
				if _, d, err := l.Acquire(t0, "k", 2, time.Second); err != nil || d.Allowed != want {
					t.Fatalf("Acquire %d = %+v, %v; want allowed %v", i, d, err, want)
				}
			}
			if got := l.InFlight(t0, "k"); got != 2 {
				t.Errorf("InFlight = %d, want 2", got)
			}
		})
	}
}
