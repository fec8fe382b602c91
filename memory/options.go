package memory

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"time"
)

// DefaultMaxKeys is the most keys a Store or a Concurrency limiter holds
// unless WithMaxKeys says otherwise: 40 to 50 MB of GCRA keys of up to 16
// bytes. Longer keys cost more, and DefaultMaxBytes binds first.
const DefaultMaxKeys = 1 << 20

// DefaultMaxBytes is the most bytes a Store or a Concurrency limiter
// counts (see WithMaxBytes) unless WithMaxBytes says otherwise: 256 MiB.
// With DefaultMaxKeys, a Store of GCRA keys is bound by the key count for
// keys of up to about 170 bytes (1,048,576 keys of 16 bytes hold 40 to 50
// MB of heap), and by the bytes beyond: it holds about 457,000 keys of 490
// to 512 bytes, the longest the service (sluice serve) hands it, in about
// 260 MB (248 MiB) of heap.
const DefaultMaxBytes = 256 << 20

// DefaultSweepInterval is how often the background sweeper drops idle keys
// unless WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// maxShards bounds WithShards: more would cost memory and buy nothing.
const maxShards = 1 << 12

// minShardKeys is the fewest keys per shard the default shard count
// allows, so that the store starts to evict close to its bound (see bound)
// and each shard's eviction samples a fair share of the keys.
const minShardKeys = 64

// minShardBytes is the fewest bytes per shard the default shard count
// allows: 64 keys of 128 bytes.
const minShardBytes = 8 << 10

// minShardRoom is the fewest bytes per shard WithShards and WithMaxBytes
// allow: the shard's empty table and as much again for keys.
const minShardRoom = 2 * emptyTableBytes

// ErrInvalidOption is wrapped by the error New and NewConcurrency return
// for an option with a value they cannot use.
var ErrInvalidOption = errors.New("memory: invalid option")

// Option configures a Store or a Concurrency limiter. Options take values;
// New and NewConcurrency check them and return an error for a bad one.
type Option func(*config)

type config struct {
	maxKeys  int
	maxBytes int64
	shards   int // 0: chosen from GOMAXPROCS, maxKeys and maxBytes
	sweep    time.Duration
}

// WithMaxKeys bounds the number of keys held. Once the store holds nearly
// n (n minus the number of shards, plus one), adding a key drops an idle
// one or, failing that, an approximately least recently used one (see
// Store). n must be positive. The default is DefaultMaxKeys.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithMaxBytes bounds the bytes held for keys, whichever of it and
// WithMaxKeys binds first. A Store counts, for each key, 64 bytes for its
// table cell (32 bytes, in a table kept at least half full), the copy of
// the key if longer than 16 bytes (or ending in a zero byte), at the size
// the allocator gives it (512 bytes for a key of 490 to 512), and for the
// window algorithms the window (64 bytes; the sliding log's ring 48 more,
// and 16 a cell as it grows); for each shard, 1 KB for its first table,
// the arrays beside its table that hold long keys and windows (8 bytes a
// cell, while it has such keys) and the numbers of the rules it has keys
// of. That is never less than the heap the Store holds, and at most 10%
// more for keys of 490 bytes or more (tables are mostly 16/25 to 4/5
// full: 40 to 50 bytes a cell; a GCRA key of 16 bytes is counted 64 and
// holds 43 to 45, one of 490 bytes is counted 587 and holds 567). A
// Concurrency limiter counts 128 bytes a key (its holder, its first lease
// and its share of the map: 115 to 135 bytes measured) and the copy of
// the key; further leases, at most the limit of each key, are not
// counted. Neither counts the rules or its fixed structures, a few KB.
// The package's tests measure these (TestBytesPerKey,
// TestConcurrencyBytesPerKey).
//
// Adding a key when the bytes are at n evicts keys as WithMaxKeys does,
// until the new key fits: from the key's shard first, from the others if
// that shard has nothing left to evict. A request whose new keys could
// never fit is refused (ErrTooLarge). n must leave each shard room for its
// first table and as much again (2 KB); the default is DefaultMaxBytes.
func WithMaxBytes(n int64) Option { return func(c *config) { c.maxBytes = n } }

// WithShards sets the number of shards the keys are spread over, each with
// its own lock and its own eviction order. n is rounded up to a
// power of two, must be positive, and may not exceed 4096, the key bound,
// or the byte bound over 2 KB.
// The default is 16 per CPU (GOMAXPROCS), at least 16, reduced so that each
// shard holds at least 64 keys and 8 KB. One shard makes eviction follow the
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
	c := config{maxKeys: DefaultMaxKeys, maxBytes: DefaultMaxBytes, sweep: DefaultSweepInterval}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.maxKeys <= 0:
		return c, fmt.Errorf("%w: max keys %d must be positive", ErrInvalidOption, c.maxKeys)
	case c.maxBytes < minShardRoom:
		return c, fmt.Errorf("%w: max bytes %d must be at least %d", ErrInvalidOption, c.maxBytes, minShardRoom)
	case c.shards < 0 || c.shards > maxShards:
		return c, fmt.Errorf("%w: shards %d must be between 1 and %d", ErrInvalidOption, c.shards, maxShards)
	case c.shards > c.maxKeys:
		return c, fmt.Errorf("%w: %d shards for %d keys leaves a shard with none", ErrInvalidOption, c.shards, c.maxKeys)
	case int64(c.shards) > c.maxBytes/minShardRoom:
		return c, fmt.Errorf("%w: %d shards for %d bytes leaves a shard less than %d", ErrInvalidOption, c.shards, c.maxBytes, minShardRoom)
	case c.sweep < 0:
		return c, fmt.Errorf("%w: sweep interval %v must not be negative", ErrInvalidOption, c.sweep)
	}
	if c.shards == 0 {
		c.shards = max(16, 16*runtime.GOMAXPROCS(0))
		for c.shards > 1 && (c.maxKeys/c.shards < minShardKeys || c.maxBytes/int64(c.shards) < minShardBytes) {
			c.shards /= 2
		}
	}
	c.shards = 1 << bits.Len(uint(c.shards-1))                              // round up to a power of two
	for c.shards > c.maxKeys || int64(c.shards) > c.maxBytes/minShardRoom { // rounding up may pass the bounds
		c.shards /= 2
	}
	return c, nil
}

// shardBits is log2 of the shard count, a power of two.
func (c *config) shardBits() uint { return uint(bits.TrailingZeros(uint(c.shards))) }
