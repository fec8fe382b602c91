package memory

import (
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// A key's state is per rule, and a rule's arithmetic is its algo.Spec,
// which the rule compiles once and keeps (sluice.Rule.Spec): an entry
// points at the Spec it was made with, and the store keeps no table of
// rules. Two Specs with one Ident (two rules with the same name,
// algorithm and limit, a rule and its copy, a configuration reloaded with
// the same rules) share their keys' states; a rule whose algorithm or
// limit changed has a new Ident, and its keys start afresh, as new keys
// (the old states are never read with the new arithmetic; they go when
// idle or evicted).

// specOf returns the Spec of check i's rule.
func specOf(i int, r *sluice.Rule) (*algo.Spec, error) {
	if r != nil {
		if sp, err := r.Spec(); err == nil {
			return sp, nil
		}
	}
	return nil, ruleError(i, r)
}

// ruleError is why check i's rule r has no Spec.
func ruleError(i int, r *sluice.Rule) error {
	if r == nil {
		return fmt.Errorf("memory: check %d has no rule", i)
	}
	_, err := r.Spec()
	return fmt.Errorf("memory: check %d: %w", i, err)
}

// sameState reports whether entries of a and b share their states. The
// first comparison settles it for a rule's own entries.
func sameState(a, b *algo.Spec) bool { return a == b || a.Ident == b.Ident }

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
