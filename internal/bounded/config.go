package bounded

import (
	"fmt"
	"math/bits"
	"runtime"
	"time"
)

// MaxShards bounds the shard count: more would cost memory and buy
// nothing.
const MaxShards = 1 << 12

// minShardKeys is the fewest keys per shard the default shard count
// allows, so that a structure starts to evict close to its bound (see
// Bound) and each shard's eviction samples a fair share of the keys.
const minShardKeys = 64

// minShardBytes is the fewest bytes per shard the default shard count
// allows: 64 keys of 128 bytes.
const minShardBytes = 8 << 10

// Config is the options' result.
type Config struct {
	MaxKeys  int
	MaxBytes int64
	Shards   int // 0: chosen from GOMAXPROCS, MaxKeys and MaxBytes
	Sweep    time.Duration
}

// Check checks c and chooses its shard count, if 0, and rounds it up to a
// power of two. minRoom is the fewest bytes a shard needs: its empty
// structures and as much again for keys. Its errors wrap invalid, so that
// each structure names itself in them.
func (c *Config) Check(minRoom int64, invalid error) error {
	switch {
	case c.MaxKeys <= 0:
		return fmt.Errorf("%w: max keys %d must be positive", invalid, c.MaxKeys)
	case c.MaxBytes < minRoom:
		return fmt.Errorf("%w: max bytes %d must be at least %d", invalid, c.MaxBytes, minRoom)
	case c.Shards < 0 || c.Shards > MaxShards:
		return fmt.Errorf("%w: shards %d must be between 1 and %d", invalid, c.Shards, MaxShards)
	case c.Shards > c.MaxKeys:
		return fmt.Errorf("%w: %d shards for %d keys leaves a shard with none", invalid, c.Shards, c.MaxKeys)
	case int64(c.Shards) > c.MaxBytes/minRoom:
		return fmt.Errorf("%w: %d shards for %d bytes leaves a shard less than %d", invalid, c.Shards, c.MaxBytes, minRoom)
	case c.Sweep < 0:
		return fmt.Errorf("%w: sweep interval %v must not be negative", invalid, c.Sweep)
	}
	if c.Shards == 0 {
		c.Shards = max(16, 16*runtime.GOMAXPROCS(0))
		for c.Shards > 1 && (c.MaxKeys/c.Shards < minShardKeys || c.MaxBytes/int64(c.Shards) < minShardBytes) {
			c.Shards /= 2
		}
	}
	c.Shards = 1 << bits.Len(uint(c.Shards-1))                         // round up to a power of two
	for c.Shards > c.MaxKeys || int64(c.Shards) > c.MaxBytes/minRoom { // rounding up may pass the bounds
		c.Shards /= 2
	}
	return nil
}

// Shift is 64 - log2 of the shard count: a 64-bit hash shifted right by it
// picks a shard.
func (c *Config) Shift() uint { return 64 - uint(bits.TrailingZeros(uint(c.Shards))) }

// Bound returns the bound of c's keys and bytes, counting from the start
// fixed bytes held by structures no eviction frees.
func (c *Config) Bound(fixed int64) *Bound {
	b := &Bound{
		Soft:     int64(c.MaxKeys - c.Shards + 1),
		Hard:     int64(c.MaxKeys),
		MaxBytes: c.MaxBytes,
		room:     c.MaxBytes - fixed,
	}
	b.bytes.Store(fixed)
	return b
}
