package memory

import (
	"fmt"
	"math"
	"unique"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// A key's state is per rule, and a rule's arithmetic is its algo.Spec,
// which the rule compiles once, where it is prepared (sluice.Rule.Prepare). A cell
// names its rule by a number in its shard's rule set, which holds the
// rules the shard has keys of and nothing more: a rule's number is given
// back with its last key in the shard, and the store keeps no table of
// rules of its own. Two Specs with one Ident (two rules with the same name,
// algorithm and limit, a rule prepared twice, a configuration reloaded with
// the same rules) share their keys' states; a rule whose algorithm or
// limit changed has a new Ident, and its keys start afresh, as new keys
// (the old states are never read with the new arithmetic; they go when
// idle or evicted).

// specOf returns the Spec of check i's rule, or why it has none.
func specOf(i int, r *sluice.PreparedRule) (*algo.Spec, error) {
	if sp := algo.Of(r); sp != nil {
		return sp, nil
	}
	return nil, ruleError(i, r)
}

// ruleError is why check i's rule r has no Spec.
func ruleError(i int, r *sluice.PreparedRule) error {
	if r == nil {
		return fmt.Errorf("memory: check %d has no rule", i)
	}
	return fmt.Errorf("memory: check %d: the rule is not prepared (sluice.Rule.Prepare)", i)
}

// specBytes is what a fresh key of sp costs besides the copy of its key,
// for the byte bound: its cell, and its window and first ring, if any.
func specBytes(sp *algo.Spec) int64 {
	switch sp.Kind {
	case algo.KindBucket:
		return keyCellBytes
	case algo.KindLog:
		return keyCellBytes + windowBytes + ringBytes + int64(firstRing(sp))*ringCellBytes
	}
	return keyCellBytes + windowBytes
}

// firstRing is the capacity of a new key's sliding log ring.
func firstRing(sp *algo.Spec) int { return int(min(sp.Key.Rate, minLogRing)) }

// ruleSet numbers the rules a shard has keys of, from 1, so that a cell
// names its rule in two bytes rather than by a pointer. Rules sharing an
// Ident share a number. Up to maxScan numbers it is searched in order,
// which for the few rules of most stores costs a comparison or two; past
// that through a map. It is read under the shard's lock, shared or
// exclusive, and changed under the exclusive lock.
type ruleSet struct {
	slots []ruleSlot // number-1 → the rule; a free slot's ident is zero
	free  []uint16   // free numbers
	idx   map[unique.Handle[algo.Key]]uint16
	peak  int // the most entries idx has had: a map does not shrink
}

type ruleSlot struct {
	ident unique.Handle[algo.Key]
	sp    *algo.Spec
	n     int // the rule's keys in the shard
}

const (
	maxScan  = 8
	maxRules = math.MaxUint16
	// idxEntryBytes is what an entry of ruleSet.idx is counted: 10
	// bytes in a slot of 16, a control byte, at a load of 7/8 and up to
	// twice the slots as the map grows, rounded up.
	idxEntryBytes = 48
	slotBytes     = int64(unsafe.Sizeof(ruleSlot{}))
)

// id returns sp's number, 0 if the shard has no key of it.
func (rs *ruleSet) id(sp *algo.Spec) uint16 {
	if rs.idx != nil {
		return rs.idx[sp.Ident]
	}
	for i := range rs.slots {
		if rs.slots[i].ident == sp.Ident {
			return uint16(i + 1)
		}
	}
	return 0
}

// add numbers sp, which has no number, and returns it; 0 if every number
// is taken.
func (rs *ruleSet) add(sp *algo.Spec) uint16 {
	var id uint16
	switch {
	case len(rs.free) > 0:
		id = rs.free[len(rs.free)-1]
		rs.free = rs.free[:len(rs.free)-1]
	case len(rs.slots) < maxRules:
		rs.slots = append(rs.slots, ruleSlot{})
		id = uint16(len(rs.slots))
	default:
		return 0
	}
	rs.slots[id-1] = ruleSlot{ident: sp.Ident, sp: sp}
	if rs.idx == nil && len(rs.slots) > maxScan {
		rs.idx = make(map[unique.Handle[algo.Key]]uint16, len(rs.slots))
		for i := range rs.slots {
			if rs.slots[i].sp != nil {
				rs.idx[rs.slots[i].ident] = uint16(i + 1)
			}
		}
	}
	if rs.idx != nil {
		rs.idx[sp.Ident] = id
		rs.peak = max(rs.peak, len(rs.idx))
	}
	return id
}

// release uncounts a key of the rule numbered id, and frees the number
// with the rule's last key.
func (rs *ruleSet) release(id uint16) {
	s := &rs.slots[id-1]
	if s.n--; s.n > 0 {
		return
	}
	if rs.idx != nil {
		delete(rs.idx, s.ident)
	}
	*s = ruleSlot{}
	rs.free = append(rs.free, id)
}

// renumber numbers the rules afresh, without the free numbers, when they
// are most of the set, so that a set that had many rules does not keep
// their room. It returns the slots as they were and, if it renumbered,
// the new number of each old one; the caller rewrites every cell. The
// caller holds the exclusive lock.
func (rs *ruleSet) renumber() ([]ruleSlot, []uint16) {
	old := rs.slots
	live := len(old) - len(rs.free)
	if len(old) <= maxScan || 2*live > len(old) {
		return old, nil
	}
	renum := make([]uint16, len(old)+1)
	*rs = ruleSet{slots: make([]ruleSlot, 0, live)}
	for i := range old {
		if old[i].sp != nil {
			rs.slots = append(rs.slots, old[i])
			renum[i+1] = uint16(len(rs.slots))
		}
	}
	if len(rs.slots) > maxScan {
		rs.idx = make(map[unique.Handle[algo.Key]]uint16, len(rs.slots))
		for i := range rs.slots {
			rs.idx[rs.slots[i].ident] = uint16(i + 1)
		}
		rs.peak = len(rs.idx)
	}
	return old, renum
}

// bytes is what the set holds, for the byte bound.
func (rs *ruleSet) bytes() int64 {
	b := int64(cap(rs.slots))*slotBytes + int64(cap(rs.free))*2
	if rs.idx != nil {
		b += int64(rs.peak) * idxEntryBytes
	}
	return b
}
