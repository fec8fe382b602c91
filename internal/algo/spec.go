package algo

import (
	"hash/maphash"
	"sync/atomic"
	"time"
	"unique"
)

// Kind is how a rule's state is kept, and so which arithmetic reads it.
type Kind uint8

// The kinds of state. They are numbered from 1 so that the zero Kind is
// no kind at all.
const (
	KindBucket  Kind = iota + 1 // token bucket, leaky bucket, GCRA: one uint64, TAT.Allow
	KindWide                    // a bucket whose tick horizon is short: a Wide, under a lock
	KindFixed                   // fixed window: Window.Fixed
	KindCounter                 // sliding window counter: Window.Counter
	KindLog                     // sliding log: Log.Step
)

// Charge is how a rule is charged; the values mirror sluice.Charge.
type Charge uint8

// The charges.
const (
	ChargeGate  Charge = iota // all-or-nothing; a cost-0 check always allowed
	ChargeUsage               // recorded whatever is left, into capped debt; cost 0 needs one unit
	ChargeCount               // as ChargeUsage; cost 0 is over only in debt
)

// Key is what identifies a rule's state: two rules with the same name,
// algorithm and limit share their keys' states, so that a configuration
// reloaded with the same rules keeps every count, and a rule whose
// algorithm or limit changes starts its keys afresh. A rule's shadow and
// failure modes are not part of it: they change what is done with a
// decision, not the state behind it.
type Key struct {
	Name   string
	Algo   string
	Rate   int64
	Period time.Duration
	Burst  int64
}

// Spec is a rule compiled once: its identity and its arithmetic, shared by
// every key of the rule and every request. sluice.Rule.Prepare makes it
// and the stores read it (Of); nothing in it changes after NewSpec but the
// values stores derive from it (Derived).
type Spec struct {
	Key Key
	// Ident is Key interned: equal Keys have equal Idents, so that a store
	// tells whether two Specs share a state with one comparison.
	Ident unique.Handle[Key]
	// Hash is a hash of Key, equal for equal Keys within a process: a
	// store mixes it into its hashes of keys, so that each rule's keys
	// spread on their own.
	Hash uint64
	Kind Kind
	// Charge is how the rule is charged, which its arithmetic (TAT,
	// Window, Log) carries. It is not part of Key: it changes what a
	// request records, not the state behind it.
	Charge Charge
	TAT    TAT    // KindBucket, KindWide
	Window Window // KindFixed, KindCounter
	Log    Log    // KindLog

	derived [numExt]atomic.Value
}

// Of returns the Spec of a *sluice.PreparedRule, and nil for anything
// else (a nil or zero one). Package sluice sets it when it is loaded: the
// stores, outside that package, read a prepared rule's arithmetic through
// it, and no exported signature names this package's types.
var Of func(rule any) *Spec

// Ext names the slot of a Spec where a store keeps what it derives from
// it, computed on first use: it is then made once per rule, and made again
// for a rule that changed, which is a new Spec, with no cache of the
// store's own.
type Ext int

// The stores' slots.
const (
	ExtRedis Ext = iota // the Redis store's script parameters
	numExt
)

// specSeed seeds Spec.Hash: one seed per process, so that equal Keys hash
// alike in every store.
var specSeed = maphash.MakeSeed()

// NewSpec compiles the rule k whose state is of kind (KindBucket for the
// bucket algorithms, which NewSpec turns into KindWide when their horizon
// is short), charged by c. The caller has validated k's limit: Period > 0,
// Rate >= 0, Burst >= 0. It errs (ErrTooLarge) for a limit whose state
// cannot be kept exactly.
func NewSpec(k Key, kind Kind, c Charge) (*Spec, error) {
	s := &Spec{Key: k, Ident: unique.Make(k), Hash: maphash.Comparable(specSeed, k), Kind: kind, Charge: c}
	var err error
	switch kind {
	case KindBucket, KindWide:
		var t TAT
		if t, err = NewTAT(k.Rate, k.Period, k.capacity()); err != nil {
			return nil, err
		}
		s.TAT, s.Kind = bucketOf(t, c)
	case KindFixed, KindCounter:
		s.Window = NewWindow(k.Rate, k.Period).Charged(c)
	case KindLog:
		if s.Log, err = NewLog(k.Rate, k.Period); err != nil {
			return nil, err
		}
		s.Log = s.Log.Charged(c)
	}
	return s, nil
}

// BucketAt is s's bucket (KindBucket or KindWide) decided at a resolution
// of res, charged as s is, and its kind, for a store whose own arithmetic
// holds it only at a coarser resolution than s.TAT's; false if the bucket
// cannot be kept exactly at res.
func (s *Spec) BucketAt(res time.Duration) (TAT, Kind, bool) {
	t, ok := NewTATAt(s.Key.Rate, s.Key.Period, s.Key.capacity(), res)
	if !ok {
		return TAT{}, 0, false
	}
	t, kind := bucketOf(t, s.Charge)
	return t, kind, true
}

// capacity is the bucket's capacity: Burst, or Rate for a zero Burst.
func (k Key) capacity() int64 {
	if k.Burst == 0 {
		return k.Rate
	}
	return k.Burst
}

// bucketOf is t charged by c, and its kind: KindWide when its tick horizon
// is short.
func bucketOf(t TAT, c Charge) (TAT, Kind) {
	t = t.Charged(c)
	if t.NeedsWide() {
		return t, KindWide
	}
	return t, KindBucket
}

// Quota is the rule's advertised quota: the capacity for the buckets, Rate
// for the windows.
func (s *Spec) Quota() int64 {
	if s.Kind == KindBucket || s.Kind == KindWide {
		return s.TAT.Burst()
	}
	return s.Key.Rate
}

// Derived returns the value a store kept in slot e with SetDerived, or nil.
func (s *Spec) Derived(e Ext) any { return s.derived[e].Load() }

// SetDerived keeps v in slot e. Racing first uses may each compute and set
// a value: every value set in one slot must be of one type and equivalent.
func (s *Spec) SetDerived(e Ext, v any) { s.derived[e].Store(v) }
