package memory

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"

	"github.com/sluicehq/sluice/internal/bounded"
)

// DefaultMaxKeys is the most keys a Store holds unless WithMaxKeys says
// otherwise: 1,048,576 keys, 40 to 50 MB of GCRA keys of up to 16 bytes. Longer keys cost more, and DefaultMaxBytes binds first.
const DefaultMaxKeys = 1 << 20

// DefaultMaxBytes is the most bytes a Store counts (see WithMaxBytes) unless WithMaxBytes says otherwise: 256 MiB.
// With DefaultMaxKeys, a Store of GCRA keys is bound by the key count for
// keys of up to about 170 bytes (1,048,576 keys of 16 bytes hold 40 to 50
// MB of heap), and by the bytes beyond: it holds about 457,000 keys of 490
// to 512 bytes, the longest the service (sluice serve) hands it, in about
// 260 MB (248 MiB) of heap.
const DefaultMaxBytes = 256 << 20

// DefaultSweepInterval is how often the background sweeper drops idle keys
// unless WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// minShardRoom is the fewest bytes per shard WithShards and WithMaxBytes
// allow: the shard's empty table and as much again for keys.
const minShardRoom = 2 * emptyTableBytes

// ErrInvalidOption is wrapped by the error New returns for an option with
// a value it cannot use.
var ErrInvalidOption = errors.New("memory: invalid option")

// Option configures a Store. Options take values; New checks them and
// returns an error for a bad one.
type Option func(*options)

// options is what the Options set.
type options struct{ bounded.Config }

// ErrTooLarge is wrapped by the error of a request that would add keys
// which could never fit in the byte bound (WithMaxBytes), even with every
// other key evicted. It wraps sluice.ErrRefused: the request is refused as
// given, not failed.
var ErrTooLarge = fmt.Errorf("memory: too large for the byte bound: %w", sluice.ErrRefused)

// maxShards bounds WithShards: more would cost memory and buy nothing.
const maxShards = bounded.MaxShards

// WithMaxKeys bounds the number of keys held. Once the store holds nearly
// n (n minus the number of shards, plus one), adding a key drops an idle
// one or, failing that, an approximately least recently used one. A Store
// drops only a key that would still allow, and refuses a new key that
// finds no such key (ErrFull; see Store). n must be positive. The default
// is DefaultMaxKeys.
func WithMaxKeys(n int) Option { return func(o *options) { o.MaxKeys = n } }

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
// holds 43 to 45, one of 490 bytes is counted 587 and holds 567). It does
// not count its fixed structures, a few KB. TestBytesPerKey measures
// these.
//
// Adding a key when the bytes are at n evicts keys as WithMaxKeys does,
// until the new key fits: from the key's shard first, from the others if
// that shard has nothing left to evict. A request whose new keys could
// never fit is refused (ErrTooLarge). n must leave each shard room for its
// first table and as much again (2 KB); the default is DefaultMaxBytes.
func WithMaxBytes(n int64) Option { return func(o *options) { o.MaxBytes = n } }

// WithShards sets the number of shards the keys are spread over, each with
// its own lock and its own eviction order. n is rounded up to a power of
// two, and may not exceed 4096, the key bound, or the byte bound over 2 KB;
// 0, like no WithShards at all, chooses the default: 16 per CPU
// (GOMAXPROCS), at least 16, reduced so that each shard holds at least 64
// keys and 8 KB. One shard makes eviction follow the
// least-recently-used order of the whole store most closely.
func WithShards(n int) Option { return func(o *options) { o.Shards = n } }

// WithSweepInterval sets how often a background goroutine drops the keys
// that have gone idle, as of the latest time each shard has seen. 0 turns
// the goroutine off: idle keys are then dropped only when room is needed or
// by calling Sweep. d must not be negative. The default is
// DefaultSweepInterval. Close stops the goroutine.
func WithSweepInterval(d time.Duration) Option { return func(o *options) { o.Sweep = d } }

// newConfig applies opts over the defaults and checks the result.
func newConfig(opts []Option) (bounded.Config, error) {
	o := options{bounded.Config{MaxKeys: DefaultMaxKeys, MaxBytes: DefaultMaxBytes, Sweep: DefaultSweepInterval}}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o.Config, o.Check(minShardRoom, ErrInvalidOption)
}
