package memory

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// DefaultMaxKeys is the most keys a Store or a Concurrency limiter holds
// unless WithMaxKeys says otherwise: 80 to 100 MB of GCRA keys.
const DefaultMaxKeys = 1 << 20

// DefaultSweepInterval is how often the background sweeper drops idle keys
// unless WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// maxShards bounds WithShards: more would cost memory and buy nothing.
const maxShards = 1 << 12

// minShardKeys is the fewest keys per shard the default shard count
// allows, so that the store starts to evict close to its bound (see bound)
// and each shard's eviction samples a fair share of the keys.
const minShardKeys = 64

// ErrInvalidOption is wrapped by the error New and NewConcurrency return
// for an option with a value they cannot use.
var ErrInvalidOption = errors.New("invalid option")

// Option configures a Store or a Concurrency limiter. Options take values;
// New and NewConcurrency check them and return an error for a bad one.
type Option func(*config)

type config struct {
	maxKeys int
	shards  int // 0: chosen from GOMAXPROCS and maxKeys
	sweep   time.Duration
}

// WithMaxKeys bounds the number of keys held. Once the store holds nearly
// n (n minus the number of shards, plus one), adding a key drops an idle
// one or, failing that, an approximately least recently used one (see
// Store). n must be positive. The default is DefaultMaxKeys.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithShards sets the number of shards the keys are spread over, each with
// its own lock and its own eviction order. n is rounded up to a
// power of two, must be positive, and may not exceed 4096 or the key bound.
// The default is 16 per CPU (GOMAXPROCS), at least 16, reduced so that each
// shard holds at least 64 keys. One shard makes eviction follow the
// least-recently-used order of the whole store most closely.
func WithShards(n int) Option { return func(c *config) { c.shards = n } }

// WithSweepInterval sets how often a background goroutine drops the keys
// that have gone idle, as of the latest time each shard has seen. 0 turns
// the goroutine off: idle keys are then dropped only when room is needed or
// by calling Sweep. d must not be negative. The default is
// DefaultSweepInterval. Close stops the goroutine.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweep = d } }

// newConfig applies opts over the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	c := config{maxKeys: DefaultMaxKeys, sweep: DefaultSweepInterval}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.maxKeys <= 0:
		return c, fmt.Errorf("memory: %w: max keys %d must be positive", ErrInvalidOption, c.maxKeys)
	case c.shards < 0 || c.shards > maxShards:
		return c, fmt.Errorf("memory: %w: shards %d must be between 1 and %d", ErrInvalidOption, c.shards, maxShards)
	case c.shards > c.maxKeys:
		return c, fmt.Errorf("memory: %w: %d shards for %d keys leaves a shard with none", ErrInvalidOption, c.shards, c.maxKeys)
	case c.sweep < 0:
		return c, fmt.Errorf("memory: %w: sweep interval %v must not be negative", ErrInvalidOption, c.sweep)
	}
	if c.shards == 0 {
		c.shards = max(16, 16*runtime.GOMAXPROCS(0))
		for c.shards > 1 && c.maxKeys/c.shards < minShardKeys {
			c.shards /= 2
		}
	}
	c.shards = 1 << bits.Len(uint(c.shards-1)) // round up to a power of two
	for c.shards > c.maxKeys {                 // rounding up may pass the bound
		c.shards /= 2
	}
	return c, nil
}

// shardBits is log2 of the shard count, a power of two.
func (c *config) shardBits() uint { return uint(bits.TrailingZeros(uint(c.shards))) }

// bound counts the keys of all shards against the store's bound. A shard
// that adds a key when the count has reached soft makes room in itself;
// a shard with nothing to evict (empty, or every key pinned by a
// multi-check) adds it anyway. With soft = maxKeys - shards + 1, the empty
// shards cannot take the count past maxKeys, the hard bound; a multi-check
// that pinned its shard past it trims back on its way out.
//
// One count for the store, not a share per shard: keys do not spread
// evenly over shards, and a shard that filled its share first would evict
// while the store still had room.
type bound struct {
	n    atomic.Int64
	soft int64
	hard int64
	_    [64]byte // n is written by every shard
}

func (c *config) bound() *bound {
	return &bound{soft: int64(c.maxKeys - c.shards + 1), hard: int64(c.maxKeys)}
}

// reserve counts one more key if the count is below soft.
func (b *bound) reserve() bool {
	for {
		n := b.n.Load()
		if n >= b.soft {
			return false
		}
		if b.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
