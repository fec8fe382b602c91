package concurrency

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/bounded"
)

// DefaultMaxKeys is the most keys a Limiter holds unless WithMaxKeys says
// otherwise: 1,048,576.
const DefaultMaxKeys = 1 << 20

// DefaultMaxBytes is the most bytes a Limiter counts (see WithMaxBytes)
// unless WithMaxBytes says otherwise: 256 MiB, which binds before
// DefaultMaxKeys for keys longer than 128 bytes.
const DefaultMaxBytes = 256 << 20

// DefaultSweepInterval is how often the background sweeper drops expired
// leases unless WithSweepInterval says otherwise.
const DefaultSweepInterval = time.Minute

// maxShards is the most shards WithShards allows: more would cost memory
// and buy nothing.
const maxShards = bounded.MaxShards

// minShardRoom is the fewest bytes per shard WithShards and WithMaxBytes
// allow: 2 KB, room for a few keys beside the shard's empty map.
const minShardRoom = 2 << 10

// ErrInvalidOption is wrapped by the error New returns for an option with
// a value it cannot use.
var ErrInvalidOption = errors.New("concurrency: invalid option")

// Option configures a Limiter. Options take values; New checks them and
// returns an error wrapping ErrInvalidOption for a bad one.
type Option func(*options) error

// options is what the Options set, for New.
type options struct {
	cfg bounded.Config
}

// WithMaxKeys bounds the number of keys held (a key with no lease held is
// not kept). Once the Limiter holds nearly n (n minus the number of
// shards, plus one), a new key takes the place of an approximately least
// recently used key whose leases have all expired or, failing that, of
// the least recently used key, whose leases are then forgotten. n must be
// positive; the default is DefaultMaxKeys.
func WithMaxKeys(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("%w: max keys %d must be positive", ErrInvalidOption, n)
		}
		o.cfg.MaxKeys = n
		return nil
	}
}

// WithMaxBytes bounds the bytes counted for keys, whichever of it and
// WithMaxKeys binds first. A key costs 128 bytes (its holder, its first
// lease and its share of the map: 115 to 135 bytes measured by
// TestBytesPerKey) and the copy of the key, at the size the allocator
// gives it; further leases, at most the limit of each key, are not
// counted, nor are the Limiter's fixed structures, a few KB.
//
// A new key that does not fit evicts keys as WithMaxKeys does until it
// fits: from its shard first, from the others if that shard has nothing
// left to evict. A key that could never fit is refused (ErrTooLarge). n
// must leave each shard 2 KB; the default is DefaultMaxBytes.
func WithMaxBytes(n int64) Option {
	return func(o *options) error {
		if n < minShardRoom {
			return fmt.Errorf("%w: max bytes %d must be at least %d", ErrInvalidOption, n, minShardRoom)
		}
		o.cfg.MaxBytes = n
		return nil
	}
}

// WithShards sets the number of shards the keys are spread over, each
// with its own lock and its own eviction order. n is rounded up to a power
// of two; it must be between 1 and 4096, and at most the key bound
// and the byte bound over 2 KB. The default is 16 per CPU (GOMAXPROCS),
// at least 16, reduced so that each shard holds at least 64 keys and
// 8 KB. One shard makes eviction follow the least-recently-used order of
// the whole Limiter most closely.
func WithShards(n int) Option {
	return func(o *options) error {
		if n < 1 || n > maxShards {
			return fmt.Errorf("%w: shards %d must be between 1 and %d", ErrInvalidOption, n, maxShards)
		}
		o.cfg.Shards = n
		return nil
	}
}

// WithSweepInterval sets how often a background goroutine drops the
// expired leases, and the keys left with none, as of the latest time each
// shard has seen. 0 turns the goroutine off: expired leases are then
// dropped when their key is next used, when room is needed, or by Sweep.
// d must not be negative; the default is DefaultSweepInterval. Close
// stops the goroutine.
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: sweep interval %v must not be negative", ErrInvalidOption, d)
		}
		o.cfg.Sweep = d
		return nil
	}
}

// newConfig applies opts over the defaults and checks them together: the
// shards against the bounds.
func newConfig(opts []Option) (bounded.Config, error) {
	o := options{cfg: bounded.Config{MaxKeys: DefaultMaxKeys, MaxBytes: DefaultMaxBytes, Sweep: DefaultSweepInterval}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return bounded.Config{}, err
		}
	}
	if err := o.cfg.Check(minShardRoom, ErrInvalidOption); err != nil {
		return bounded.Config{}, err
	}
	return o.cfg, nil
}
