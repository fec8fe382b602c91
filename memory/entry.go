package memory

import (
	"encoding/binary"
	"github.com/sluicehq/sluice/internal/bounded"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// entry is one key's state under one rule, kept in its shard's table: 64
// bytes, one cache line, plus a copy of a key longer than 16 bytes and,
// for the window algorithms, a window. A key of up to 16 bytes is kept in
// the entry itself, so that finding a key reads one line of the table,
// and the line after it now and then; for a longer key, inl holds the
// size of its copy, as allocated, for the byte bound.
type entry struct {
	sp  *algo.Spec      // the rule's arithmetic; nil for an empty cell
	x   atomic.Uint64   // the bucket algorithms' state (algo.TAT)
	w   *window         // the window algorithms' state
	key string          // the key: its bytes are inl's, or a copy of the caller's
	inl [inlineKey]byte // a short key's bytes, or a long key's copy's size
	// hash is the low half of the key's hash: a tag that spares most key
	// comparisons, and the entry's home in the table.
	hash uint32
	// used is when the key was last used, as a stamp (see stampOf), or
	// pinned while a multi-check holds it.
	used atomic.Uint32
}

// inlineKey is the longest key kept inside its entry.
const inlineKey = 16

// cloneKey returns the key an entry keeps and what it costs beyond the
// entry: key itself for a key of up to 16 bytes, which setKey copies into
// the entry, else a copy (never the caller's string, which may pin a
// larger buffer) and its size as allocated.
func cloneKey(key string) (string, int64) {
	if len(key) <= inlineKey {
		return key, 0
	}
	return bounded.CopyKey(key)
}

// setKey makes e's key key, from cloneKey with its size. A short key's
// string points into e.inl, so an entry moves only with moveTo.
func (e *entry) setKey(key string, size int64) {
	if len(key) > inlineKey {
		e.key = key
		binary.LittleEndian.PutUint64(e.inl[:], uint64(size))
		return
	}
	n := copy(e.inl[:], key)
	e.key = unsafe.String(&e.inl[0], n)
}

// bytes is what e counts against the byte bound: its cell, the copy of a
// long key, and the window and its ring.
func (e *entry) bytes() int64 {
	b := specBytes(e.sp)
	if len(e.key) > inlineKey {
		b += int64(binary.LittleEndian.Uint64(e.inl[:]))
	}
	if e.sp.Kind == algo.KindLog {
		b += int64(e.w.ring.Cap()-firstRing(e.sp)) * ringCellBytes
	}
	return b
}

// moveTo moves e to dst, an empty cell, and empties e. The caller holds
// the exclusive lock.
func (e *entry) moveTo(dst *entry) {
	e.copyTo(dst)
	*e = entry{}
}

// copyTo makes dst, an empty cell, a copy of e, for a table about to be
// dropped. The caller holds the exclusive lock.
func (e *entry) copyTo(dst *entry) {
	dst.inl = e.inl // a fixed-size copy: no call, unlike copy()
	if len(e.key) > inlineKey {
		dst.key = e.key // the copy setKey made: share it
	} else {
		dst.key = unsafe.String(&dst.inl[0], len(e.key))
	}
	dst.sp, dst.w, dst.hash = e.sp, e.w, e.hash
	dst.x.Store(e.x.Load())
	dst.used.Store(e.used.Load())
}

// stampOf is the recency stamp of a request at now: its time in units of
// 2^20 ns (about a millisecond), modulo 2^32, which wraps every 52 days;
// ages are read as differences under 2^31 units, 26 days. pinned is never
// a stamp.
func stampOf(now int64) uint32 {
	st := uint32(now >> 20)
	if st == pinned {
		st--
	}
	return st
}

const pinned = math.MaxUint32

// age is how long before st the key was last used, in stamp units; 0 if
// it was used at st or after (requests come a little out of order).
func (e *entry) age(st uint32) uint32 {
	return uint32(max(int32(st-e.used.Load()), 0))
}

// touch records a use at stamp st. It writes only when the stamp changes,
// so that a hot key does not dirty its cache line on every request. The
// caller holds the shard's lock, shared or exclusive; a pinned entry is
// only seen under the exclusive lock, by the multi-check that pinned it.
func (e *entry) touch(st uint32) {
	if e.used.Load() != st {
		e.used.Store(st)
	}
}

// step decides n units at now against e: lock-free for the bucket
// algorithms (one CAS on one uint64), under e's own lock for the windows.
// A sliding log's ring that grows is counted in b, past its bounds if need
// be: the caller then relieves the store. The caller holds the shard's
// lock, shared or exclusive.
func (e *entry) step(now, n int64, b *bounded.Bound) sluice.Decision {
	sp := e.sp
	if sp.Kind == algo.KindBucket {
		ok, rem, retry, reset := sp.TAT.Allow(&e.x, now, n)
		return sluice.Decision{Allowed: ok, Limit: sp.TAT.Burst(), Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	e.w.mu.Lock()
	c := e.w.ringCap()
	d := e.w.step(sp, now, n)
	if grown := e.w.ringCap() - c; grown > 0 {
		b.Force(0, int64(grown)*ringCellBytes)
	}
	e.w.mu.Unlock()
	return d
}

// idle reports whether e's state no longer affects any decision at now or
// later. The caller holds the shard's exclusive lock.
func (e *entry) idle(now int64) bool {
	if e.sp.Kind == algo.KindBucket {
		return e.sp.TAT.Idle(e.x.Load(), now)
	}
	return e.w.idle(e.sp, now)
}

func (e *entry) save() snapshot {
	if e.sp.Kind == algo.KindBucket {
		return snapshot{x: e.x.Load()}
	}
	return e.w.save()
}

func (e *entry) restore(s snapshot) {
	if e.sp.Kind == algo.KindBucket {
		e.x.Store(s.x)
		return
	}
	e.w.restore(s)
}
