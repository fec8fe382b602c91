package memory

import (
	"sync"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/ring"
)

// window is one key's state for the window algorithms, under its own lock.
// The three algorithms' states share its fields, so that one small type
// (64 bytes) serves them all: the fixed window keeps its count in a; the
// sliding counter its previous and current counts in a and b; the sliding
// log its count in a and its entries in ring. A bucket of short horizon
// (algo.KindWide) keeps its algo.Wide here too: the origin in win, the state in
// a.
type window struct {
	mu   sync.Mutex
	ring *ring.Buffer[algo.Entry]
	win  int64 // index of the current window
	a, b int64
	last int64 // latest time seen, Unix ns
	used bool
}

// minLogRing is the sliding log's first ring size. The ring grows by
// doubling up to Rate cells as the key's live entries need it, so that a
// key with few requests does not pay for Rate cells.
const minLogRing = 4

func newWindow(sp *algo.Spec) *window {
	w := new(window)
	if sp.Kind == algo.KindLog {
		w.ring = ring.New[algo.Entry](firstRing(sp))
	}
	return w
}

// The bytes a window costs, for the byte bound: the window (56 bytes, in
// the allocator's class of 64), and for the sliding log its ring (48) and
// each of the ring's cells.
const (
	windowBytes   = 64
	ringBytes     = 48
	ringCellBytes = int64(unsafe.Sizeof(algo.Entry{}))
)

// ringCap is the capacity of w's ring, 0 if it has none.
func (w *window) ringCap() int {
	if w.ring == nil {
		return 0
	}
	return w.ring.Cap()
}

// step decides n units at now. The caller holds w.mu or the shard's
// exclusive lock.
func (w *window) step(sp *algo.Spec, now, n int64) sluice.Decision {
	var d algo.Decision
	switch sp.Kind {
	case algo.KindFixed:
		s := algo.FixedState{Window: w.win, Count: w.a, Last: w.last, Used: w.used}
		d = sp.Window.Fixed(&s, now, n)
		w.win, w.a, w.last, w.used = s.Window, s.Count, s.Last, s.Used
	case algo.KindCounter:
		s := algo.CounterState{Window: w.win, Prev: w.a, Curr: w.b, Last: w.last, Used: w.used}
		d = sp.Window.Counter(&s, now, n)
		w.win, w.a, w.b, w.last, w.used = s.Window, s.Prev, s.Curr, s.Last, s.Used
	case algo.KindLog:
		w.makeRoom(sp, now, n)
		s := algo.LogState{Ring: w.ring, Count: w.a, Last: w.last, Used: w.used}
		d = sp.Log.Step(&s, now, n)
		w.a, w.last, w.used = s.Count, s.Last, s.Used
	case algo.KindWide:
		s := w.wide()
		var next uint64
		d, next = sp.TAT.Step(s.X, sp.TAT.Enter(&s, now), n)
		w.win, w.a, w.last, w.used = s.Origin, int64(next), s.Last, s.Used
	}
	return sluice.Decision(d)
}

// makeRoom grows the sliding log's ring when a push of n units at now
// would find it full of live entries. The log never has more entries than
// Rate, each of at least one unit, so Rate cells are the most it needs (a
// usage rule's units past Rate join the newest entry of a full ring of
// Rate cells, as algo.Log does).
func (w *window) makeRoom(sp *algo.Spec, now, n int64) {
	r := w.ring
	if n <= 0 || n > sp.Key.Rate && sp.Charge == algo.ChargeGate || r.Len() < r.Cap() || int64(r.Cap()) >= sp.Key.Rate {
		return
	}
	if w.used && now < w.last {
		now = w.last // as the log reads it
	}
	if e, ok := r.PeekOldest(); ok && expired(now, e.At, int64(sp.Key.Period)) {
		return // the log drops it before pushing
	}
	nr := ring.New[algo.Entry](int(min(2*int64(r.Cap()), sp.Key.Rate)))
	for e := range r.All() {
		nr.Push(e)
	}
	w.ring = nr
}

// expired reports whether an entry at at has left the window (now-per, now].
func expired(now, at, per int64) bool {
	return now > at && uint64(now)-uint64(at) >= uint64(per)
}

// idle reports whether the state no longer affects a decision at now or
// later. A time before the latest seen is never idle: the state still
// holds that time back.
func (w *window) idle(sp *algo.Spec, now int64) bool {
	if w.used && now < w.last {
		return false
	}
	switch sp.Kind {
	case algo.KindFixed:
		s := algo.FixedState{Window: w.win, Count: w.a, Last: w.last, Used: w.used}
		return sp.Window.FixedIdle(&s, now)
	case algo.KindCounter:
		s := algo.CounterState{Window: w.win, Prev: w.a, Curr: w.b, Last: w.last, Used: w.used}
		return sp.Window.CounterIdle(&s, now)
	case algo.KindLog:
		s := algo.LogState{Ring: w.ring, Count: w.a, Last: w.last, Used: w.used}
		return sp.Log.Idle(&s, now)
	case algo.KindWide:
		s := w.wide()
		return sp.TAT.WideIdle(&s, now)
	}
	return true
}

// denying reports whether a request of one unit at now would be denied,
// debt included, changing nothing: each algorithm steps a copy of the
// state, the sliding log reads its entries in place. The caller holds the
// shard's exclusive lock.
func (w *window) denying(sp *algo.Spec, now int64) bool {
	switch sp.Kind {
	case algo.KindFixed:
		s := algo.FixedState{Window: w.win, Count: w.a, Last: w.last, Used: w.used}
		return !sp.Window.Fixed(&s, now, 1).Allowed
	case algo.KindCounter:
		s := algo.CounterState{Window: w.win, Prev: w.a, Curr: w.b, Last: w.last, Used: w.used}
		return !sp.Window.Counter(&s, now, 1).Allowed
	case algo.KindLog:
		s := algo.LogState{Ring: w.ring, Count: w.a, Last: w.last, Used: w.used}
		return sp.Log.Denies(&s, now)
	case algo.KindWide:
		s := w.wide()
		_, _, ok := sp.TAT.Take(s.X, sp.TAT.Enter(&s, now), 1)
		return !ok
	}
	return false
}

// wide reads an algo.KindWide state out of w's fields.
func (w *window) wide() algo.Wide {
	return algo.Wide{Origin: w.win, Last: w.last, Used: w.used, X: uint64(w.a)}
}

// snapshot is a state saved before a multi-check charges it tentatively.
type snapshot struct {
	x       uint64
	win     int64
	a, b    int64
	last    int64
	used    bool
	ringLen int
}

func (w *window) save() snapshot {
	s := snapshot{win: w.win, a: w.a, b: w.b, last: w.last, used: w.used}
	if w.ring != nil {
		s.ringLen = w.ring.Len()
	}
	return s
}

// restore undoes the charges made since save at the same now. Charges at
// one time only push entries to the log (the entries that leave were
// dropped before the save), so undoing them drops the newest.
func (w *window) restore(s snapshot) {
	w.win, w.a, w.b, w.last, w.used = s.win, s.a, s.b, s.last, s.used
	if w.ring != nil {
		dropNewest(w.ring, w.ring.Len()-s.ringLen)
	}
}

// dropNewest removes the k newest elements of r, which has only Pop for
// the oldest: it turns the others round to the back first. O(Len).
func dropNewest(r *ring.Buffer[algo.Entry], k int) {
	if k <= 0 {
		return
	}
	for range r.Len() - k {
		e, _ := r.Pop()
		r.Push(e)
	}
	for range k {
		r.Pop()
	}
}

// freshDecision is the decision for n units at now on a key with no state,
// computed without making one.
func freshDecision(sp *algo.Spec, now, n int64) sluice.Decision {
	switch sp.Kind {
	case algo.KindBucket, algo.KindWide:
		d, _ := sp.TAT.Step(0, now, n)
		return sluice.Decision(d)
	case algo.KindLog:
		if n > 0 && n <= sp.Key.Rate {
			break // it would push: use a ring
		}
		var r ring.Buffer[algo.Entry] // capacity 0: holds nothing, and nothing is pushed
		s := algo.LogState{Ring: &r}
		return sluice.Decision(sp.Log.Step(&s, now, n))
	}
	w := window{}
	if sp.Kind == algo.KindLog {
		w.ring = ring.New[algo.Entry](1)
	}
	return w.step(sp, now, n)
}
