package memory

import (
	"github.com/sluicehq/sluice/internal/bounded"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// shard is one part of the store: an open-addressing table of entries,
// with its own lock. Requests for existing keys share the lock; whatever
// changes the table (adding, dropping, growing) takes it exclusively, so an
// entry never moves under a reader.
//
// The table is linear-probing over the entries themselves, so that a
// lookup reads the line of the key's home cell and, when the key was
// pushed along, the next lines, which the processor fetches ahead. It is
// at most 4/5 full and grows by a quarter at a time, which keeps it at
// least 16/25 full once grown: 64 bytes a cell make 80 to 100 a key. A
// table that dropped or evicted keys leave less than half full is
// compacted, so that the byte bound may count 128 bytes a key for its
// cell (keyCellBytes) and no more than that is held. A dropped entry is
// filled by backward-shift deletion: no tombstones. The table's size need
// not be a power of two: a hash is mapped to a cell by multiplying
// (h·size >> 32).
//
// Eviction is sampled least-recently-used, as Redis does it: each entry
// keeps when it was last used (a stamp of the request's time, about a
// millisecond), and the victim is the least recently used of the next 8
// keys at a hand that goes round the table, unless one of them is idle:
// dropping that loses nothing. A key among the most recent tenth survives
// unless the seven others sampled with it are all as recent: about one
// chance in ten million.
type shard struct {
	mu    sync.RWMutex
	last  atomic.Int64 // latest time a request brought, Unix ns: the sweeper's now
	tab   []entry
	n     int            // live entries
	bound *bounded.Bound // the store's counts, shared by its shards
	hand  int
	_     [64]byte // keep shards apart in memory: each is written on every call
}

const minTable = 16

// The bytes of a table, for the byte bound: a cell is 64 bytes, and a key
// is counted 128 for its cell, what a cell costs in a table half full, the
// emptiest that compact leaves one; a shard's first, empty table is
// counted once for all.
const (
	cellBytes       = int64(unsafe.Sizeof(entry{}))
	keyCellBytes    = 2 * cellBytes
	emptyTableBytes = minTable * cellBytes
)

// init makes the shard's first table, which the caller has counted.
func (sh *shard) init(b *bounded.Bound) {
	sh.bound = b
	sh.tab = make([]entry, minTable)
}

// home is the cell a hash belongs in.
func (sh *shard) home(hash uint32) int { return int(uint64(hash) * uint64(len(sh.tab)) >> 32) }

// observe records now as the latest time seen, if it is. Racing calls may
// leave an earlier time: the sweeper then drops a little less.
func (sh *shard) observe(now int64) {
	if now > sh.last.Load() {
		sh.last.Store(now)
	}
}

// lookup returns the cell of key under sp (or a Spec sharing its states),
// or -1. The caller holds the lock, shared or exclusive.
func (sh *shard) lookup(h uint64, sp *algo.Spec, key string) int {
	tab := sh.tab
	hash := uint32(h)
	for i := sh.home(hash); ; {
		e := &tab[i]
		if e.sp == nil {
			return -1
		}
		if e.hash == hash && sameState(e.sp, sp) && e.key == key {
			return i
		}
		if i++; i == len(tab) {
			i = 0
		}
	}
}

// find returns the entry of key under sp, or nil. The caller holds the
// lock, and the entry stays where it is until the table next changes.
func (sh *shard) find(h uint64, sp *algo.Spec, key string) *entry {
	if i := sh.lookup(h, sp, key); i >= 0 {
		return &sh.tab[i]
	}
	return nil
}

// insert adds key under sp, which the caller has found missing, with a
// fresh state: a zero word for the buckets, a new window for the others.
// It makes room first: when the store is at its bounds, by evicting keys
// of this shard, whose counts the new key takes over, until the key fits;
// a shard with nothing left to evict adds the key over the bounds (see
// bound), and the caller relieves the store once it has let go of the
// shard. It returns an error wrapping ErrTooLarge, adding nothing, for a
// key that could never fit. The caller holds the exclusive lock; the entry
// stays where it is until the table next changes.
func (sh *shard) insert(h uint64, sp *algo.Spec, key string, now int64) (*entry, error) {
	key, size := cloneKey(key)
	dk, db := int64(1), specBytes(sp)+size
	if err := sh.bound.Fits(db); err != nil {
		return nil, err
	}
	for !sh.bound.Take(dk, db) {
		v, ok := sh.victim(now)
		if !ok {
			sh.bound.Force(dk, db)
			break
		}
		dk, db = dk-1, db-sh.tab[v].bytes()
		sh.delete(v)
	}
	if dk < 0 { // evicted more than one: a long key in place of short ones
		sh.compact()
	}
	if 5*(sh.n+1) > 4*len(sh.tab) {
		sh.resize(len(sh.tab) + len(sh.tab)/4)
	}
	hash := uint32(h)
	i := sh.home(hash)
	for sh.tab[i].sp != nil {
		if i++; i == len(sh.tab) {
			i = 0
		}
	}
	e := &sh.tab[i]
	e.setKey(key, size)
	e.sp = sp
	e.hash = hash
	e.x.Store(0)
	e.used.Store(stampOf(now))
	if sp.Kind != algo.KindBucket {
		e.w = newWindow(sp)
	}
	sh.n++
	return e, nil
}

// sample is how many keys victim compares.
const sample = 8

// victim picks the cell of the key to evict: the first idle key, or the
// least recently used, of the next sample keys at the hand, pinned keys
// left out. It returns false only when every key is pinned.
func (sh *shard) victim(now int64) (int, bool) {
	tab := sh.tab
	st := stampOf(now)
	best, oldest, seen := -1, uint32(0), 0
	for range tab {
		if seen == sample {
			break
		}
		i := sh.hand
		if sh.hand++; sh.hand >= len(tab) {
			sh.hand = 0
		}
		e := &tab[i]
		if e.sp == nil || e.used.Load() == pinned {
			continue
		}
		if e.idle(now) {
			return i, true
		}
		if age := e.age(st); best < 0 || age > oldest {
			best, oldest = i, age
		}
		seen++
	}
	return best, best >= 0
}

// trim evicts from the shard while the store is over its bounds (see
// Store.relieve), sparing, if spare is set, the keys used at now or
// later. The caller holds the exclusive lock.
func (sh *shard) trim(now int64, spare bool) {
	st := stampOf(now)
	for sh.bound.Over() {
		v, ok := sh.victim(now)
		if !ok || spare && sh.tab[v].age(st) == 0 && !sh.tab[v].idle(now) {
			return
		}
		sh.remove(v)
	}
	sh.compact()
}

// remove drops the entry in cell i and uncounts it. The caller holds the
// exclusive lock.
func (sh *shard) remove(i int) {
	b := sh.tab[i].bytes()
	sh.delete(i)
	sh.bound.Force(-1, -b)
}

// delete drops the entry in cell i, whose counts the caller takes over or
// uncounts, and moves the entries after it back where they can be found
// (backward-shift deletion): each entry of the run after the hole moves
// into it unless its home lies cyclically in (hole, entry].
func (sh *shard) delete(i int) {
	tab := sh.tab
	tab[i] = entry{} // let the key and the window go
	for j := i; ; {
		if j++; j == len(tab) {
			j = 0
		}
		e := &tab[j]
		if e.sp == nil {
			break
		}
		k := sh.home(e.hash)
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		e.moveTo(&tab[i])
		i = j
	}
	sh.n--
}

// compact shrinks a table less than half full, whose keys' keyCellBytes
// would not pay for it, to 3/4 full, giving back the memory of keys
// dropped or evicted. The caller holds the exclusive lock.
func (sh *shard) compact() {
	if len(sh.tab) > minTable && 2*sh.n < len(sh.tab) {
		sh.resize(sh.n*4/3 + 1)
	}
}

// resize moves the entries to a new table of size cells and drops the old
// one. The caller holds the exclusive lock.
func (sh *shard) resize(size int) {
	old := sh.tab
	sh.tab = make([]entry, max(size, minTable, sh.n+1))
	sh.hand = 0
	for j := range old {
		e := &old[j]
		if e.sp == nil {
			continue
		}
		i := sh.home(e.hash)
		for sh.tab[i].sp != nil {
			if i++; i == len(sh.tab) {
				i = 0
			}
		}
		e.copyTo(&sh.tab[i])
	}
}

// sweepBatch bounds how many cells a sweep looks at under one hold of the
// lock, so that requests to the shard wait microseconds, not the whole
// sweep.
const sweepBatch = 1024

// sweep drops the keys idle at now and returns how many, and compacts the
// table.
func (sh *shard) sweep(now int64) int {
	dropped := 0
	for start := 0; ; start += sweepBatch {
		sh.mu.Lock()
		if start >= len(sh.tab) {
			sh.compact()
			sh.mu.Unlock()
			return dropped
		}
		for i := start; i < min(start+sweepBatch, len(sh.tab)); {
			if e := &sh.tab[i]; e.sp != nil && e.idle(now) {
				sh.remove(i) // an entry from further on may move into i: look again
				dropped++
				continue
			}
			i++
		}
		sh.mu.Unlock()
	}
}
