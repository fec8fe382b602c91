package memory

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// maxInline is how many checks a Take handles without allocating.
const maxInline = 8

// held is one check of a multi-check while its shards are locked.
type held struct {
	sp    *algo.Spec
	p     probe
	r     ref  // valid while the table does not change
	found bool // r is set
	first int  // the first check on the same key: a key named twice is one state
	saved snapshot
	peek  sluice.Decision // the state at now, uncharged
	used  bool            // a usage check recorded into the state
}

// takeMulti decides several checks together. A gate charge is
// all-or-nothing across keys that may live in different shards, so it
// locks those shards exclusively, in shard order (no deadlock), records
// the usage checks, charges each gate check in turn and, if one not in
// shadow mode denies, undoes the gate checks' charges. Under the locks
// nothing else reads or writes those keys, so the result is that of a
// serial order: exact, never a transient false denial.
func (s *Store) takeMulti(now int64, checks []sluice.Check, out []sluice.Decision) error {
	var buf [maxInline]held
	hs := buf[:0]
	if len(checks) > maxInline {
		hs = make([]held, 0, len(checks))
	}
	for i := range checks {
		sp, err := specOf(i, checks[i].Rule)
		if err != nil {
			return err
		}
		hs = append(hs, held{sp: sp})
	}
	if !charges(checks) {
		// Nothing will be charged: each check is decided on its own, as a
		// read, with no exclusive lock.
		for i := range checks {
			if err := s.take1(hs[i].sp, checks[i].Key, now, checks[i].Units(), &out[i]); err != nil {
				return err
			}
		}
		return nil
	}
	// Could the keys fit together, were they all new? A request that could
	// not is refused, rather than evicting every other key only to evict
	// its own. (Keys are counted at their lengths here; insert counts each
	// key's copy as allocated, a little more, and refuses one that alone
	// could never fit.)
	var size int64
	for i := range hs {
		size += specBytes(hs[i].sp) + int64(len(checks[i].Key))
	}
	if err := s.bound.Fits(size); err != nil {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	defer func() {
		if s.bound.Over() { // adding keys to pinned or empty shards
			s.relieve(now, hs[0].p.h)
		}
	}()
	return s.charge(now, checks, out, hs)
}

// charge is takeMulti's body under the shards' locks. It errs, having
// charged nothing, if a key could never fit (ErrTooLarge).
func (s *Store) charge(now int64, checks []sluice.Check, out []sluice.Decision, hs []held) error {
	var ibuf [maxInline]int
	ids := ibuf[:0]
	for i := range hs {
		hs[i].p.init(s.hash(hs[i].sp, checks[i].Key), checks[i].Key)
		hs[i].found = false
		ids = addSorted(ids, int(hs[i].p.h>>s.shift))
	}
	for _, id := range ids {
		s.shards[id].observe(now)
		s.shards[id].mu.Lock()
	}
	defer func() {
		for k := len(ids) - 1; k >= 0; k-- {
			s.shards[ids[k]].mu.Unlock()
		}
	}()

	// Find the keys there are, and pin them so that adding the others
	// cannot evict them; then add the others. Adding moves cells about
	// the table, so the cells are found again once all are in.
	for i := range hs {
		if r, ok := s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp); ok {
			r.cell().used.Store(pinned)
			hs[i].r, hs[i].found = r, true
		}
	}
	for i := range hs {
		if hs[i].found {
			continue
		}
		sh := s.shard(hs[i].p.h)
		r, ok := sh.find(&hs[i].p, hs[i].sp) // added for an earlier check?
		if !ok {
			var err error
			if r, err = sh.insert(&hs[i].p, hs[i].sp, now); err != nil {
				if errors.Is(err, ErrFull) && s.denyHeld(now, checks, out, hs) {
					return nil
				}
				s.unpin(now, hs)
				return err
			}
		}
		r.cell().used.Store(pinned)
		hs[i].found = true
	}
	for i := range hs {
		hs[i].r, _ = s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp)
	}

	// Bring each state to now with a peek, which charges nothing; a state
	// named twice is one state. Restoring a saved state then undoes
	// exactly the charges made at now since (see window.restore).
	for i := range hs {
		hs[i].first = i
		for j := range i {
			if hs[j].r == hs[i].r {
				hs[i].first = j
				break
			}
		}
		if hs[i].first == i {
			hs[i].r.step(hs[i].sp, now, 0, s.bound, &hs[i].peek)
		}
	}

	// Record the usage checks, whatever the others say; then save the
	// states and charge the gate checks, which are undone if the request
	// is denied. In each pass the enforced checks go first, so that a
	// shadow check's charge can never deny an enforced check on the same
	// key.
	allowed := s.pass(now, checks, out, hs, false, true)
	for i := range hs {
		if hs[i].first == i {
			hs[i].saved = hs[i].r.save()
		}
	}
	allowed = s.pass(now, checks, out, hs, true, allowed)
	if !allowed {
		for i := range hs {
			if hs[i].first == i {
				hs[i].r.restore(hs[i].saved)
			}
		}
		// A gate check that would have allowed reports its state
		// uncharged: the first peek's, a gate peek's answer, or a new
		// peek if a usage check recorded into the state since.
		for i := range hs {
			if hs[i].sp.Charge != algo.ChargeGate || !out[i].Allowed {
				continue
			}
			if f := &hs[hs[i].first]; !f.used {
				put(&out[i], f.peek)
				out[i].Allowed, out[i].RetryAfter = true, 0
			} else {
				hs[i].r.step(hs[i].sp, now, 0, s.bound, &out[i])
			}
		}
	}
	s.unpin(now, hs)
	return nil
}

// denyHeld decides a request that a new key found no room for, when one
// of the keys the store does hold would deny it: the request is denied,
// as it would have been with room, rather than left to the failure modes,
// which would let a spent key through whenever a new key rides along.
// Each held key's decision is tried and undone; a key that denies reports
// it, the usage checks of held keys are recorded as any denied request's
// are, the other gate checks report their state uncharged, and a key not
// placed reports a fresh state's answer, stored nowhere. It reports false,
// having changed nothing, when every held key would allow. The caller
// holds the shards' locks; denyHeld unpins the cells when it returns
// true.
func (s *Store) denyHeld(now int64, checks []sluice.Check, out []sluice.Decision, hs []held) bool {
	denied := false
	for i := range hs {
		if !hs[i].found {
			continue
		}
		// Adding keys moves cells about, so each is found again.
		hs[i].r, _ = s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp)
		saved := hs[i].r.save()
		hs[i].r.step(hs[i].sp, now, checks[i].Units(), s.bound, &out[i])
		hs[i].r.restore(saved)
		denied = denied || (!checks[i].Rule.Shadow() && !out[i].Allowed)
	}
	if !denied {
		return false
	}
	for i := range hs {
		switch {
		case !hs[i].found:
			put(&out[i], freshDecision(hs[i].sp, now, checks[i].Units()))
		case hs[i].sp.Charge != algo.ChargeGate:
			hs[i].r, _ = s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp)
			hs[i].r.step(hs[i].sp, now, checks[i].Units(), s.bound, &out[i])
		case out[i].Allowed:
			hs[i].r, _ = s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp)
			hs[i].r.step(hs[i].sp, now, 0, s.bound, &out[i])
			out[i].Allowed, out[i].RetryAfter = true, 0
		}
	}
	s.unpin(now, hs)
	return true
}

// pass decides the gate checks (gate true) or the usage ones, charging
// each its cost, the enforced checks first. It returns allowed, false if
// one of the enforced checks denied.
func (s *Store) pass(now int64, checks []sluice.Check, out []sluice.Decision, hs []held, gate, allowed bool) bool {
	for _, shadow := range [2]bool{false, true} {
		for i := range checks {
			if checks[i].Rule.Shadow() != shadow || (hs[i].sp.Charge == algo.ChargeGate) != gate {
				continue
			}
			hs[i].r.step(hs[i].sp, now, checks[i].Units(), s.bound, &out[i])
			allowed = allowed && (shadow || out[i].Allowed)
			hs[hs[i].first].used = hs[hs[i].first].used || !gate
		}
	}
	return allowed
}

// unpin releases the cells of a multi-check, dropping those that are
// idle (the keys added for checks that were not charged, and any others
// back to idle) and stamping the others used at now. Dropping moves cells
// about, so each is found again by its key.
func (s *Store) unpin(now int64, hs []held) {
	st := stampOf(now)
	for i := range hs {
		r, ok := s.shard(hs[i].p.h).find(&hs[i].p, hs[i].sp)
		if !ok {
			continue // not reached before a key too large stopped the call
		}
		c := r.cell()
		if c.used.Load() != pinned {
			continue // released under another check on the same key
		}
		if r.idle(now) {
			r.sh.remove(r.i)
		} else {
			c.used.Store(st)
		}
	}
}

// charges reports whether a request of cost n could charge any of checks:
// whether any costs more than 0.
func charges(checks []sluice.Check) bool {
	for i := range checks {
		if checks[i].Units() > 0 {
			return true
		}
	}
	return false
}

// addSorted adds id to the sorted set ids.
func addSorted(ids []int, id int) []int {
	i := len(ids)
	for i > 0 && ids[i-1] >= id {
		if ids[i-1] == id {
			return ids
		}
		i--
	}
	ids = append(ids, 0)
	copy(ids[i+1:], ids[i:])
	ids[i] = id
	return ids
}
