package memory

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// kind is how a spec keeps a key's state.
type kind uint8

const (
	kindBucket  kind = iota // token bucket, leaky bucket, GCRA: one uint64, CAS'd
	kindFixed               // fixed window, under the entry's lock
	kindCounter             // sliding window counter, under the entry's lock
	kindLog                 // sliding log, under the entry's lock
	kindWide                // a bucket whose tick horizon is short: algo.Wide, under the entry's lock
)

// specKey is what identifies a rule's state: two rules with the same name,
// algorithm and limit share their keys' states (a reloaded configuration
// keeps its counts), and a rule whose algorithm or limit changes is a new
// spec whose keys start afresh. Shadow and Failure are not part of it: they
// change what is done with a decision, not the state behind it.
type specKey struct {
	name  string
	algo  sluice.Algo
	limit sluice.Limit
}

// spec is a rule's prepared arithmetic, computed once and shared by all its
// keys.
type spec struct {
	key  specKey
	kind kind
	salt uint64 // mixed into key hashes, so each spec's keys spread on their own
	tat  algo.TAT
	win  algo.Window
	log  algo.Log
	rate int64 // for the sliding log's ring
	per  int64 // Period in ns, for the sliding log's ring
	// bytes is what a fresh key costs besides the copy of its key, for
	// the byte bound: its cell, and its window and first ring, if any.
	bytes int64

	_ [64]byte // keep refs, written on every insert and removal, off the read path's line
	// refs counts the entries that use the spec; -1 once the registry has
	// retired it, after which it takes no new entries.
	refs atomic.Int64
}

func (s *spec) matches(r *sluice.Rule) bool {
	return s.key.name == r.Name && s.key.algo == r.Algorithm && s.key.limit == r.Limit
}

// acquire counts one more entry on s, unless s is retired.
func (s *spec) acquire() bool {
	for {
		n := s.refs.Load()
		if n < 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *spec) release() { s.refs.Add(-1) }

// newSpec validates r and prepares its arithmetic.
func newSpec(r *sluice.Rule) (*spec, error) {
	if r.Name == "" {
		return nil, fmt.Errorf("memory: rule has no name")
	}
	l := r.Limit
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("memory: rule %q: %w", r.Name, err)
	}
	s := &spec{
		key:  specKey{r.Name, r.Algorithm, l},
		salt: rand.Uint64(),
		rate: l.Rate,
		per:  int64(l.Period),
	}
	switch r.Algorithm {
	case sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA:
		t, err := algo.NewTAT(l.Rate, l.Period, l.Capacity())
		if err != nil {
			return nil, fmt.Errorf("memory: rule %q: %w", r.Name, err)
		}
		s.kind, s.tat = kindBucket, t
		if t.NeedsWide() {
			// Its bare state would misread after the horizon if the key sat
			// untouched and unswept that long (a shard with no traffic).
			s.kind = kindWide
		}
	case sluice.AlgoFixedWindow:
		s.kind, s.win = kindFixed, algo.NewWindow(l.Rate, l.Period)
	case sluice.AlgoSlidingCounter:
		s.kind, s.win = kindCounter, algo.NewWindow(l.Rate, l.Period)
	case sluice.AlgoSlidingLog:
		lg, err := algo.NewLog(l.Rate, l.Period)
		if err != nil {
			return nil, fmt.Errorf("memory: rule %q: %w", r.Name, err)
		}
		s.kind, s.log = kindLog, lg
	default:
		_, err := sluice.ParseAlgo(string(r.Algorithm))
		return nil, fmt.Errorf("memory: rule %q: %w", r.Name, err)
	}
	s.bytes = keyCellBytes
	switch s.kind {
	case kindBucket:
	case kindLog:
		s.bytes += windowBytes + ringBytes + int64(s.firstRing())*ringCellBytes
	default:
		s.bytes += windowBytes
	}
	return s, nil
}

// firstRing is the capacity of a new key's sliding log ring.
func (s *spec) firstRing() int { return int(min(s.rate, minLogRing)) }

// cacheBits sizes the registry's cache of rule pointers.
const cacheBits = 10

// registry maps rules to their specs. A check names its rule by pointer,
// so the pointer is looked up first, in a small two-way cache that never
// locks; the rule's contents are compared on every hit, so a rule changed
// in place is noticed. A miss looks the rule up by value under a lock.
//
// Memory stays bounded however many rules a caller makes: the cache has a
// fixed size, and a spec no entry uses is retired from the map once the map
// has doubled since it was last swept.
type registry struct {
	cache [1 << cacheBits]atomic.Pointer[cached]

	mu    sync.Mutex
	specs map[specKey]*spec
	limit int // sweep retired specs when len(specs) passes this
}

type cached struct {
	rule *sluice.Rule
	spec *spec
}

const minRegistryLimit = 256

func newRegistry() *registry {
	return &registry{specs: make(map[specKey]*spec), limit: minRegistryLimit}
}

// slot is the first of r's two cache slots. Only the pointer's value is
// used, as a hash; it is never turned back into a pointer.
func slot(r *sluice.Rule) int {
	p := uint64(uintptr(unsafe.Pointer(r)))
	return int((p*0x9E3779B97F4A7C15)>>(64-cacheBits)) &^ 1
}

// get returns r's spec. r is not nil.
func (g *registry) get(r *sluice.Rule) (*spec, error) {
	i := slot(r)
	if c := g.cache[i].Load(); c != nil && c.rule == r && c.spec.matches(r) {
		return c.spec, nil
	}
	if c := g.cache[i+1].Load(); c != nil && c.rule == r && c.spec.matches(r) {
		return c.spec, nil
	}
	return g.lookup(r, i)
}

// lookup finds or makes r's spec by value and caches it under r.
func (g *registry) lookup(r *sluice.Rule, i int) (*spec, error) {
	k := specKey{r.Name, r.Algorithm, r.Limit}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.specs[k]
	if s == nil || s.refs.Load() < 0 {
		var err error
		if s, err = newSpec(r); err != nil {
			return nil, err
		}
		if len(g.specs) >= g.limit {
			g.retire()
		}
		g.specs[k] = s
	}
	// Of the two slots, replace one that is empty or holds a rule that no
	// longer matches; else the second, which leaves the first to the rule
	// that has held it longest.
	c := &cached{rule: r, spec: s}
	if old := g.cache[i].Load(); old == nil || !old.spec.matches(old.rule) || old.spec.refs.Load() < 0 {
		g.cache[i].Store(c)
	} else {
		g.cache[i+1].Store(c)
	}
	return s, nil
}

// refresh is get after a spec was found retired: it skips the cache.
func (g *registry) refresh(r *sluice.Rule) (*spec, error) { return g.lookup(r, slot(r)) }

// retire drops the specs no entry uses. The caller holds g.mu.
func (g *registry) retire() {
	for k, s := range g.specs {
		if s.refs.CompareAndSwap(0, -1) {
			delete(g.specs, k)
		}
	}
	g.limit = max(minRegistryLimit, 2*len(g.specs))
}

// len is the number of live specs, for tests.
func (g *registry) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.specs)
}
