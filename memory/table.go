package memory

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/bounded"

	"github.com/sluicehq/sluice/internal/algo"
)

// shard is one part of the store: an open-addressing table of cells,
// with its own lock. Requests for existing keys share the lock; whatever
// changes the table (adding, dropping, growing) takes it exclusively, so a
// cell never moves under a reader.
//
// The table is linear-probing over the cells themselves, so that a lookup
// reads the line of the key's home cell and, when the key was pushed
// along, the next lines, which the processor fetches ahead. It is at most
// 4/5 full and grows by a quarter at a time, which keeps it at least
// 16/25 full once grown: 32 bytes a cell make 40 to 50 a key. A table
// that dropped or evicted keys leave less than half full is compacted, so
// that the byte bound may count 64 bytes a key for its cell
// (keyCellBytes) and no more than that is held. A dropped cell is filled
// by backward-shift deletion: no tombstones. The table's size need not be
// a power of two: a hash is mapped to a cell by multiplying
// (h·size >> 32).
//
// A cell holds no pointer (see cell): its rule is a number in the shard's
// rule set, and a long key's copy and a window are kept in arrays beside
// the table, at the cell's index, which a shard makes only while it has
// such keys, and counts at their size (side). A cell's hash is not kept
// either: moving a cell (deletion, growth) hashes its key again.
//
// Eviction is sampled least-recently-used, as Redis does it: each cell
// keeps when it was last used (a stamp of the request's time, about a
// millisecond), and the victim is the least recently used of the next 8
// keys at a hand that goes round the table, unless one of them is idle:
// dropping that loses nothing. A key that would deny is never the
// victim; a sample of only such keys is followed by up to three more,
// and then the new key is refused (see victim). A key among the most
// recent tenth survives unless the seven others sampled with it are all
// as recent: about one chance in ten million.
type shard struct {
	mu    sync.RWMutex
	last  atomic.Int64 // latest time a request brought, Unix ns: the sweeper's now
	tab   []cell
	longs []*byte   // beside tab: a long key's copy; nil while the shard has none
	wins  []*window // beside tab: a window rule's window; nil while the shard has none
	nLong int       // long keys
	nWin  int       // keys with a window
	rules ruleSet
	n     int            // live cells
	bound *bounded.Bound // the store's counts, shared by its shards
	seed  maphash.Seed
	side  int64 // bytes counted for longs, wins and rules
	hand  int
	// counts are the store's evictions and refusals, shared by its shards
	counts *counts
	_      [64]byte // keep shards apart in memory: each is written on every call
}

const minTable = 32

// The bytes of a table, for the byte bound: a cell is 32 bytes, and a key
// is counted 64 for its cell, what a cell costs in a table half full, the
// emptiest that compact leaves one; a shard's first, empty table is
// counted once for all.
const (
	cellBytes       = int64(unsafe.Sizeof(cell{}))
	keyCellBytes    = 2 * cellBytes
	emptyTableBytes = minTable * cellBytes
)

// init makes the shard's first table, which the caller has counted.
func (sh *shard) init(b *bounded.Bound, seed maphash.Seed, ct *counts) {
	sh.bound = b
	sh.counts = ct
	sh.seed = seed
	sh.tab = make([]cell, minTable)
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

// lookup returns the cell of p's key under the rule numbered rid, or -1.
// The caller holds the lock, shared or exclusive.
func (sh *shard) lookup(p *probe, rid uint16) int {
	tab := sh.tab
	for i := sh.home(uint32(p.h)); ; {
		c := &tab[i]
		if c.rid == 0 {
			return -1
		}
		if c.rid == rid && c.tag == p.tag && c.k[1] == p.k[1] {
			if c.tag&tagLong == 0 {
				if c.k[0] == p.k[0] {
					return i
				}
			} else if unsafe.String(sh.longs[i], len(p.key)) == p.key {
				return i
			}
		}
		if i++; i == len(tab) {
			i = 0
		}
	}
}

// find returns the cell of p's key under sp (or a Spec sharing its
// states). The caller holds the lock, and the cell stays where it is until
// the table next changes.
func (sh *shard) find(p *probe, sp *algo.Spec) (ref, bool) {
	rid := sh.rules.id(sp)
	if rid == 0 {
		return ref{}, false
	}
	i := sh.lookup(p, rid)
	return ref{sh, i}, i >= 0
}

// hashAt hashes again the key of cell i, under its rule, as Store.hash
// did when it was added.
func (sh *shard) hashAt(i int) uint32 {
	c := &sh.tab[i]
	var long *byte
	if c.tag&tagLong != 0 {
		long = sh.longs[i]
	}
	return keyHash(sh.seed, c, long, sh.rules.slots[c.rid-1].sp)
}

// keyHash is the low half of Store.hash for the key of c, a long key's
// copy being long, under sp.
func keyHash(seed maphash.Seed, c *cell, long *byte, sp *algo.Spec) uint32 {
	if c.tag&tagLong != 0 {
		return uint32(maphash.String(seed, unsafe.String(long, int(c.k[1]))) ^ sp.Hash)
	}
	var b [inlineKey]byte
	binary.LittleEndian.PutUint64(b[:8], c.k[0])
	binary.LittleEndian.PutUint64(b[8:], c.k[1])
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return uint32(maphash.Bytes(seed, b[:n]) ^ sp.Hash)
}

// insert adds p's key under sp, which the caller has found missing, with a
// fresh state: a zero word for the buckets, a new window for the others.
// It makes room first: when the store is at its bounds, by evicting keys
// of this shard, whose counts the new key takes over, until the key fits;
// a shard with no key to sample (empty, or every key pinned) adds the key
// over the bounds (see bound), and the caller relieves the store once it
// has let go of the shard. It returns an error wrapping ErrTooLarge,
// adding nothing, for a key that could never fit, and ErrFull, adding
// nothing and giving back the room of any key it evicted, when every key
// it samples would deny. The caller holds the exclusive lock; the cell
// stays where it is until the table next changes.
func (sh *shard) insert(p *probe, sp *algo.Spec, now int64) (ref, error) {
	long := p.tag&tagLong != 0
	var kp *byte
	var size int64
	if long {
		var k string
		k, size = bounded.CopyKey(p.key) // a long key is never empty
		kp = unsafe.StringData(k)
	}
	dk, db := int64(1), specBytes(sp)+size
	if err := sh.bound.Fits(db); err != nil {
		return ref{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	for !sh.bound.Take(dk, db) {
		v, c := sh.victim(now)
		if c == chooseDenial {
			// Give back the counts of the keys evicted for this one.
			sh.bound.Force(dk-1, db-specBytes(sp)-size)
			sh.compact()
			sh.counts.refused.Add(1)
			return ref{}, ErrFull
		}
		if c == chooseNone {
			sh.bound.Force(dk, db)
			break
		}
		dk, db = dk-1, db-ref{sh, v}.bytes()
		sh.evict(v, c)
	}
	if dk < 0 { // evicted more than one: a long key in place of short ones
		sh.compact()
	}
	if 5*(sh.n+1) > 4*len(sh.tab) {
		sh.resize(len(sh.tab) + len(sh.tab)/4) // may renumber the rules: number sp after
	}
	rid := sh.rules.id(sp)
	if rid == 0 {
		// Every number taken (65,535 rules with keys in the shard): a
		// rule's last key in the shard gives its number back.
		for rid = sh.rules.add(sp); rid == 0; rid = sh.rules.add(sp) {
			v, c := sh.victim(now)
			if c >= chooseNone {
				sh.bound.Force(-1, -specBytes(sp)-size)
				return ref{}, fmt.Errorf("%w: keys of %d rules in one shard", ErrTooLarge, maxRules)
			}
			b := ref{sh, v}.bytes()
			sh.evict(v, c)
			sh.bound.Force(-1, -b)
		}
	}
	i := sh.home(uint32(p.h))
	for sh.tab[i].rid != 0 {
		if i++; i == len(sh.tab) {
			i = 0
		}
	}
	c := &sh.tab[i]
	c.k = p.k
	if long {
		c.k[0] = uint64(size)
		if sh.longs == nil {
			sh.longs = make([]*byte, len(sh.tab))
		}
		sh.longs[i] = kp
		sh.nLong++
	}
	c.tag = p.tag
	c.rid = rid
	c.x.Store(0)
	c.used.Store(stampOf(now))
	sh.rules.slots[rid-1].n++
	if sp.Kind != algo.KindBucket {
		if sh.wins == nil {
			sh.wins = make([]*window, len(sh.tab))
		}
		sh.wins[i] = newWindow(sp)
		sh.nWin++
	}
	sh.n++
	sh.recountSide()
	return ref{sh, i}, nil
}

// sideBytes is what the shard holds beside its cells: the arrays of long
// keys and windows, at their size, and its rule set.
func (sh *shard) sideBytes() int64 {
	return int64(len(sh.longs)+len(sh.wins))*ptrBytes + sh.rules.bytes()
}

const ptrBytes = int64(unsafe.Sizeof(uintptr(0)))

// recountSide brings the count of the shard's side bytes up to date, past
// the bounds if need be: the caller relieves the store once it has let go
// of the shard. The caller holds the exclusive lock.
func (sh *shard) recountSide() {
	if b := sh.sideBytes(); b != sh.side {
		sh.bound.Force(0, b-sh.side)
		sh.side = b
	}
}

// sample is how many keys victim compares, and samples how many samples
// it takes, at most, when every key it sampled was denying.
const (
	sample  = 8
	samples = 4
)

// A choice is what victim found.
type choice uint8

const (
	choseIdle    choice = iota // an idle key: dropping it loses nothing
	choseLive                  // a live key that would allow: the least recently used sampled
	chooseNone                 // no key that is not pinned: nothing to sample
	chooseDenial               // every key sampled would deny: none may go
)

// victim picks the cell of the key to evict, pinned keys left out: the
// first idle key of the next sample keys at the hand, else the least
// recently used of them that would allow a request of one unit at now. A
// key that would deny is never chosen: evicting it would let its client
// start afresh. When a sample holds only such keys it takes the next, up
// to samples of them, and then gives up (chooseDenial), so that the work
// under the lock stays bounded however many keys deny.
func (sh *shard) victim(now int64) (int, choice) {
	tab := sh.tab
	st := stampOf(now)
	best, oldest, seen := -1, uint32(0), 0
	for range tab {
		if seen == sample*samples || seen%sample == 0 && seen > 0 && best >= 0 {
			break
		}
		i := sh.hand
		if sh.hand++; sh.hand >= len(tab) {
			sh.hand = 0
		}
		c := &tab[i]
		if c.rid == 0 || c.used.Load() == pinned {
			continue
		}
		seen++
		r := ref{sh, i}
		if r.idle(now) {
			return i, choseIdle
		}
		if r.denying(now) {
			continue
		}
		if age := c.age(st); best < 0 || age > oldest {
			best, oldest = i, age
		}
	}
	switch {
	case best >= 0:
		return best, choseLive
	case seen == 0:
		return -1, chooseNone
	}
	return -1, chooseDenial
}

// evict drops the key in cell i, which victim chose as c, as delete does,
// and counts the eviction.
func (sh *shard) evict(i int, c choice) {
	sh.delete(i)
	sh.counts.evicted(c)
}

// trim evicts from the shard while the store is over its bounds (see
// Store.relieve), sparing, if spare is set, the keys used at now or
// later, and always the keys that would deny. The caller holds the
// exclusive lock.
func (sh *shard) trim(now int64, spare bool) {
	st := stampOf(now)
	for sh.bound.Over() {
		v, c := sh.victim(now)
		if c >= chooseNone || spare && c == choseLive && sh.tab[v].age(st) == 0 {
			break
		}
		b := ref{sh, v}.bytes()
		sh.evict(v, c)
		sh.bound.Force(-1, -b)
	}
	sh.compact()
}

// remove drops the key in cell i and uncounts it. The caller holds the
// exclusive lock.
func (sh *shard) remove(i int) {
	b := ref{sh, i}.bytes()
	sh.delete(i)
	sh.bound.Force(-1, -b)
}

// delete drops the key in cell i, whose counts the caller takes over or
// uncounts, and moves the cells after it back where they can be found
// (backward-shift deletion): each cell of the run after the hole moves
// into it unless its home lies cyclically in (hole, cell]. The side
// arrays' bytes are counted anew.
func (sh *shard) delete(i int) {
	tab := sh.tab
	c := &tab[i]
	sh.rules.release(c.rid)
	if c.tag&tagLong != 0 {
		sh.nLong--
	}
	if sh.wins != nil && sh.wins[i] != nil {
		sh.nWin--
	}
	sh.clear(i)
	for j := i; ; {
		if j++; j == len(tab) {
			j = 0
		}
		if tab[j].rid == 0 {
			break
		}
		k := sh.home(sh.hashAt(j))
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		sh.move(j, i)
		i = j
	}
	sh.n--
	if sh.nLong == 0 {
		sh.longs = nil
	}
	if sh.nWin == 0 {
		sh.wins = nil
	}
	sh.recountSide()
}

// clear empties cell i, letting its key's copy and window go.
func (sh *shard) clear(i int) {
	sh.tab[i] = cell{}
	if sh.longs != nil {
		sh.longs[i] = nil
	}
	if sh.wins != nil {
		sh.wins[i] = nil
	}
}

// move moves cell j, with what the side arrays hold for it, to cell i,
// which is empty, and empties j.
func (sh *shard) move(j, i int) {
	src, dst := &sh.tab[j], &sh.tab[i]
	dst.k, dst.tag, dst.rid = src.k, src.tag, src.rid
	dst.x.Store(src.x.Load())
	dst.used.Store(src.used.Load())
	if sh.longs != nil {
		sh.longs[i] = sh.longs[j]
	}
	if sh.wins != nil {
		sh.wins[i] = sh.wins[j]
	}
	sh.clear(j)
}

// compact shrinks a table less than half full, whose keys' keyCellBytes
// would not pay for it, to 3/4 full, giving back the memory of keys
// dropped or evicted. The caller holds the exclusive lock.
func (sh *shard) compact() {
	if len(sh.tab) > minTable && 2*sh.n < len(sh.tab) {
		sh.resize(sh.n*4/3 + 1)
	}
}

// resize moves the cells to a new table of size cells, and the side
// arrays with them, and drops the old ones; a rule set mostly of free
// numbers is numbered afresh on the way. The caller holds the exclusive
// lock.
func (sh *shard) resize(size int) {
	old, oldLongs, oldWins := sh.tab, sh.longs, sh.wins
	oldRules, renum := sh.rules.renumber()
	size = max(size, minTable, sh.n+1)
	sh.tab = make([]cell, size)
	sh.longs, sh.wins = nil, nil
	if sh.nLong > 0 {
		sh.longs = make([]*byte, size)
	}
	if sh.nWin > 0 {
		sh.wins = make([]*window, size)
	}
	sh.hand = 0
	for j := range old {
		src := &old[j]
		if src.rid == 0 {
			continue
		}
		var long *byte
		if src.tag&tagLong != 0 {
			long = oldLongs[j]
		}
		i := sh.home(keyHash(sh.seed, src, long, oldRules[src.rid-1].sp))
		for sh.tab[i].rid != 0 {
			if i++; i == len(sh.tab) {
				i = 0
			}
		}
		dst := &sh.tab[i]
		dst.k, dst.tag, dst.rid = src.k, src.tag, src.rid
		if renum != nil {
			dst.rid = renum[src.rid]
		}
		dst.x.Store(src.x.Load())
		dst.used.Store(src.used.Load())
		if oldLongs != nil {
			sh.longs[i] = oldLongs[j]
		}
		if oldWins != nil {
			sh.wins[i] = oldWins[j]
		}
	}
	sh.recountSide()
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
			if sh.tab[i].rid != 0 && (ref{sh, i}).idle(now) {
				sh.remove(i) // a cell from further on may move into i: look again
				dropped++
				continue
			}
			i++
		}
		sh.mu.Unlock()
	}
}
