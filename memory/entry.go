package memory

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/bounded"
)

// cell is one key's state under one rule, kept in its shard's table: 32
// bytes, two to a cache line, so that a bucket key of up to 16 bytes costs
// its cell and nothing else. The cell holds no pointer: the rule is a
// number in its shard's rule set (rid), a short key is kept in the cell
// itself, and what a cell cannot hold lives in arrays beside the table,
// at the cell's index, made only for a shard that has such keys: a long
// key's copy (shard.longs) and a window (shard.wins).
type cell struct {
	// k is a short key's bytes, zero-padded (see packKey); for a long
	// key, the size of its copy as allocated and its length.
	k [2]uint64
	// x is the bucket algorithms' state (algo.TAT); 0 for the windows.
	x atomic.Uint64
	// tag is 16 bits of the key's hash, apart from those that pick the
	// shard and the home cell, so that most cells of other keys are told
	// apart without comparing keys; its low bit is set for a long key.
	tag uint16
	// rid is the rule's number in the shard's rule set; 0 for an empty
	// cell.
	rid uint16
	// used is when the key was last used, as a stamp (see stampOf), or
	// pinned while a multi-check holds it.
	used atomic.Uint32
}

// inlineKey is the longest key kept inside its cell.
const inlineKey = 16

// tagLong marks the tag of a long key's cell.
const tagLong = 1

// short reports whether key is kept in its cell: up to 16 bytes, and not
// ending in a zero byte, which the padding could not tell from the end.
func short(key string) bool {
	return len(key) <= inlineKey && (len(key) == 0 || key[len(key)-1] != 0)
}

// packKey is the cell's k for a short key: its bytes, zero-padded to 16,
// as two words, so that finding it compares two words.
func packKey(key string) (k0, k1 uint64) {
	var b [inlineKey]byte
	copy(b[:], key)
	return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
}

// tagOf is the tag of a key of hash h.
func tagOf(h uint64, long bool) uint16 {
	t := uint16(h>>32) &^ tagLong
	if long {
		t |= tagLong
	}
	return t
}

// probe is what finding a key compares with the cells: computed once per
// request.
type probe struct {
	key string
	h   uint64
	k   [2]uint64 // packKey(key); for a long key, {0, len(key)}: only k[1] is compared
	tag uint16
}

// init makes p the probe of key, of hash h. It writes p in place, a field
// at a time, rather than returning a probe to copy: see put.
func (p *probe) init(h uint64, key string) {
	p.key, p.h = key, h
	if short(key) {
		p.k[0], p.k[1] = packKey(key)
		p.tag = tagOf(h, false)
		return
	}
	p.k[0], p.k[1] = 0, uint64(len(key))
	p.tag = tagOf(h, true)
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
func (c *cell) age(st uint32) uint32 {
	return uint32(max(int32(st-c.used.Load()), 0))
}

// touch records a use at stamp st. It writes only when the stamp changes,
// so that a hot key does not dirty its cache line on every request. The
// caller holds the shard's lock, shared or exclusive; a pinned cell is
// only seen under the exclusive lock, by the multi-check that pinned it.
func (c *cell) touch(st uint32) {
	if c.used.Load() != st {
		c.used.Store(st)
	}
}

// ref names a cell of a shard while the table does not change: the
// caller holds the shard's lock.
type ref struct {
	sh *shard
	i  int
}

func (r ref) cell() *cell { return &r.sh.tab[r.i] }

// step decides n units at now against r under sp, the rule the cell was
// found under, and writes the decision to *d: lock-free for the bucket
// algorithms (one CAS on one uint64), under the window's own lock for the
// others. A sliding log's ring that grows is counted in b, past its bounds
// if need be: the caller then relieves the store. The caller holds the
// shard's lock, shared or exclusive.
func (r ref) step(sp *algo.Spec, now, n int64, b *bounded.Bound, d *sluice.Decision) {
	if sp.Kind == algo.KindBucket {
		ok, rem, retry, reset := sp.TAT.Allow(&r.sh.tab[r.i].x, now, n)
		d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter = ok, sp.TAT.Burst(), rem, retry, reset
		return
	}
	w := r.sh.wins[r.i]
	w.mu.Lock()
	c := w.ringCap()
	put(d, w.step(sp, now, n))
	if grown := w.ringCap() - c; grown > 0 {
		b.Force(0, int64(grown)*ringCellBytes)
	}
	w.mu.Unlock()
}

// put sets *o to d field by field. A Decision has too many fields for the
// compiler to keep in registers, so a plain assignment (or a Decision
// returned through a variable) goes through a copy on the stack, written a
// field at a time and read back in 16-byte blocks, and the processor
// cannot forward such loads from the pending stores: each stalls, and a
// request would pay that several times over. Decisions
// are therefore written to where they go, with put or field by field.
func put(o *sluice.Decision, d sluice.Decision) {
	o.Allowed, o.Limit, o.Remaining, o.RetryAfter, o.ResetAfter = d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter
}

// spec is the rule of r's cell, which must not be empty.
func (r ref) spec() *algo.Spec { return r.sh.rules.slots[r.cell().rid-1].sp }

// idle reports whether r's state no longer affects any decision at now or
// later. The caller holds the shard's exclusive lock.
func (r ref) idle(now int64) bool {
	sp := r.spec()
	if sp.Kind == algo.KindBucket {
		return sp.TAT.Idle(r.cell().x.Load(), now)
	}
	return r.sh.wins[r.i].idle(sp, now)
}

// denying reports whether r's key would deny a request of one unit at
// now, debt included: such a key is never evicted, since forgetting it
// would let its client start afresh. The caller holds the shard's
// exclusive lock.
func (r ref) denying(now int64) bool {
	sp := r.spec()
	if sp.Kind == algo.KindBucket {
		_, _, ok := sp.TAT.Take(r.cell().x.Load(), now, 1)
		return !ok
	}
	return r.sh.wins[r.i].denying(sp, now)
}

// bytes is what r's key counts against the byte bound: its cell, the copy
// of a long key, and the window and its ring.
func (r ref) bytes() int64 {
	c := r.cell()
	sp := r.spec()
	b := specBytes(sp)
	if c.tag&tagLong != 0 {
		b += int64(c.k[0])
	}
	if sp.Kind == algo.KindLog {
		b += int64(r.sh.wins[r.i].ring.Cap()-firstRing(sp)) * ringCellBytes
	}
	return b
}

func (r ref) save() snapshot {
	if r.spec().Kind == algo.KindBucket {
		return snapshot{x: r.cell().x.Load()}
	}
	return r.sh.wins[r.i].save()
}

func (r ref) restore(s snapshot) {
	if r.spec().Kind == algo.KindBucket {
		r.cell().x.Store(s.x)
		return
	}
	r.sh.wins[r.i].restore(s)
}
