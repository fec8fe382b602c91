package bounded

import (
	"fmt"
	"sync/atomic"
)

// Bound counts the keys and the bytes of all shards against the bounds.
//
// Keys: a shard that adds a key when the count has reached Soft makes
// room in itself; a shard with nothing to evict (empty, or every key
// pinned by a multi-check) adds it anyway. With Soft = MaxKeys - shards +
// 1, the empty shards cannot take the count past MaxKeys, the hard bound.
//
// Bytes: no such margin can be kept, since a key may be of any length. A
// shard that adds a key evicts from itself until the key fits; one left
// with nothing to evict adds the key over MaxBytes, and its caller, once
// it has let go of the shard, evicts from the other shards until the
// structure is back within (Over tells it when). It is over its byte
// bound only for that while, and only by keys added in that while to
// shards with nothing to evict, which a structure of many keys a shard
// does not have. (The memory store never evicts a key that would deny:
// while the other shards hold only such keys, it stays over by those
// keys, at most one a shard, until they can go.)
//
// A multi-check that adds keys to shards whose keys it has pinned takes
// the store past either bound alike, and relieves it on its way out.
//
// One count for the structure, not a share per shard: keys do not spread
// evenly over shards, and a shard that filled its share first would evict
// while the structure still had room.
//
// The fields are set by Config.Bound and only read after.
type Bound struct {
	n        atomic.Int64 // keys
	bytes    atomic.Int64
	Soft     int64 // keys
	Hard     int64 // keys
	MaxBytes int64
	room     int64    // MaxBytes less what no eviction frees: the most one request may add
	_        [64]byte // n and bytes are written by every shard
}

// Keys returns the number of keys counted.
func (b *Bound) Keys() int64 { return b.n.Load() }

// Bytes returns the number of bytes counted.
func (b *Bound) Bytes() int64 { return b.bytes.Load() }

// Take counts dk more keys and db more bytes, either of which may be
// negative (the caller evicted keys and gives their counts back), if the
// keys stay under Soft and the bytes within MaxBytes, or do not grow. It
// reports whether it did; if not, it counts nothing.
func (b *Bound) Take(dk, db int64) bool {
	if dk > 0 && !addWithin(&b.n, dk, b.Soft) {
		return false
	}
	if db > 0 && !addWithin(&b.bytes, db, b.MaxBytes) {
		if dk > 0 {
			b.n.Add(-dk)
		}
		return false
	}
	if dk < 0 {
		b.n.Add(dk)
	}
	if db < 0 {
		b.bytes.Add(db)
	}
	return true
}

// addWithin adds d, positive, to v if the sum is at most limit.
func addWithin(v *atomic.Int64, d, limit int64) bool {
	for {
		x := v.Load()
		if x+d > limit {
			return false
		}
		if v.CompareAndSwap(x, x+d) {
			return true
		}
	}
}

// Force counts dk more keys and db more bytes, past the bounds if need be.
func (b *Bound) Force(dk, db int64) {
	if dk != 0 {
		b.n.Add(dk)
	}
	if db != 0 {
		b.bytes.Add(db)
	}
}

// Over reports whether the keys are past the hard bound or the bytes past
// MaxBytes.
func (b *Bound) Over() bool { return b.n.Load() > b.Hard || b.bytes.Load() > b.MaxBytes }

// Fits returns nil if a request adding keys of size bytes could fit once
// every other key is evicted, else an error that says so, for the
// structure to wrap in its own.
func (b *Bound) Fits(size int64) error {
	if size <= b.room {
		return nil
	}
	return fmt.Errorf("keys of %d bytes, room for %d", size, b.room)
}
