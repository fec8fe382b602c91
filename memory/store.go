package memory

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/bounded"
	"hash/maphash"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// ErrClosed is returned by the methods of a closed Store.
var ErrClosed = errors.New("memory: closed")

// ErrShortOut is wrapped by the error of a Take whose out has fewer
// elements than checks.
var ErrShortOut = errors.New("memory: out shorter than checks")

// Store is an in-process sluice.Store: per-key state for every algorithm,
// bounded in memory, safe for concurrent use.
//
// Keys are spread over shards by hash. A request for an existing key takes
// its shard's lock shared and decides without allocating: the token
// bucket, leaky bucket and GCRA with one compare-and-swap on the key's one
// uint64, the windows under the key's own lock. A new key, and a request of
// several checks, take the shards' locks exclusively.
//
// The state of a key is per rule: a rule is identified by its name,
// algorithm and limit, so a configuration reloaded with the same rules
// keeps every count, and a rule whose algorithm or limit changed starts
// its keys afresh, as new keys (the old states are never read with the new
// arithmetic; they go when idle or evicted).
//
// Memory is bounded by WithMaxKeys and WithMaxBytes, whichever binds
// first. A key whose state is back to idle (its ResetAfter has passed) is
// dropped without loss: by the background sweeper, by Sweep, or when room
// is needed. When the store is full and a new key arrives, the new key's
// shard evicts an idle key if it finds one among those it samples, else
// the least recently used of them that would still allow a request of one
// unit (sampled LRU, as Redis does; see shard), whose state is then
// forgotten: the key starts afresh if it comes back, which admits at most
// what it had used again. A key that would deny is never evicted, so a
// flood of new keys cannot reset a client that spent its limit: a new key
// that finds only such keys in its samples is refused with ErrFull, which
// a sluice.Limiter decides by the rule's failure mode, unless a key of the
// same request that the store holds denies it: that request is denied as
// with room. Stats counts the
// evictions of each kind and the refusals.
//
// To hold N keys that deny at once, give the store N keys' room in both
// bounds: WithMaxKeys of N plus the number of shards (see WithMaxKeys),
// and WithMaxBytes of N times the bytes counted for a key,
// below, plus 1 KB per shard: for N = 1,000,000 token bucket, leaky
// bucket or GCRA keys of up to 16 bytes, 64 MB and 32 KB; for as many
// fixed window or sliding counter keys, about 141 MB; for sliding log
// keys of up to 4 requests in their window, about 253 MB. The default
// bounds hold 1,048,576 such bucket keys, and 4 MiB about 65,000.
//
// A token bucket, leaky bucket or GCRA key of up to 16 bytes costs
// its cell, 40 to 50 bytes; a longer key also a copy of it (512 bytes for
// a key of 490 to 512) and 10 to 13 bytes beside its cell; a fixed window
// or sliding counter key 74 to 77 bytes more than a bucket key (its
// window, and its place beside its cell); a sliding log key 186 to 189
// more (its window and a ring of 4 cells), and 16 bytes for each request
// in its window past 4, up to Rate. The byte bound counts all of these,
// the cell at 64 bytes (see WithMaxBytes). TestBytesPerKey measures them.
//
// Times are the callers': a request stamped earlier than one already
// decided for its key is decided as if at the later time, as the
// single-key algorithms do, as long as the key is held. A request that
// neither charges nor records usage nor finds its key stores nothing. A
// key in debt (a usage rule's charge past its limit) is not idle until
// the debt has drained: the sweeper keeps it, and, as a key that would
// deny, it is never evicted.
type Store struct {
	shards []shard
	shift  uint // 64 - log2(len(shards)): the hash's top bits pick the shard
	seed   maphash.Seed
	bound  *bounded.Bound
	life   bounded.Sweeper
	counts counts
}

var _ sluice.Store = (*Store)(nil)

// New returns an empty Store. Unless WithSweepInterval(0) is given, it
// starts a goroutine that drops idle keys; Close stops it.
func New(opts ...Option) (*Store, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{
		shards: make([]shard, c.Shards),
		shift:  c.Shift(),
		seed:   maphash.MakeSeed(),
		bound:  c.Bound(int64(c.Shards) * emptyTableBytes),
	}
	for i := range s.shards {
		s.shards[i].init(s.bound, s.seed, &s.counts)
	}
	s.life.Start(c.Sweep, s.sweepSeen)
	return s, nil
}

// Take decides a request at now against checks together and writes
// check i's decision to out[i]. See sluice.Store for the contract.
//
// A check whose rule charges usage (sluice.ChargeUsage, ChargeCount) is
// recorded its cost (Check.Units) whether it allows or not. If every check
// not in shadow mode allows, each gate check (sluice.ChargeGate) that
// allows is charged its cost too; otherwise none is, and a gate check that
// would have allowed reports its state uncharged (the decision of a peek).
// Checks are decided in order, usage checks first, then gate checks, those
// not in shadow mode first in each; a key named twice is charged twice. Under any interleaving of concurrent calls the
// decisions are those of some serial order of the calls: nothing is
// over-admitted and nothing is denied that a serial order would allow.
//
// It errs, charging nothing, if ctx is done, the store closed, out too
// short, a check has no prepared rule, the keys it
// would add could never fit in the byte bound (ErrTooLarge, which wraps
// sluice.ErrRefused), or a key it would add finds no room, every key it
// could evict being one that would deny (ErrFull, which wraps
// sluice.ErrNoRoom). It does not allocate for existing keys and up to 8
// checks.
func (s *Store) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.life.Closed() {
		return ErrClosed
	}
	if len(out) < len(checks) {
		return fmt.Errorf("%w: %d decisions for %d checks", ErrShortOut, len(out), len(checks))
	}
	ns := now.UnixNano()
	if len(checks) == 1 {
		c := &checks[0]
		sp := algo.Of(c.Rule)
		if sp == nil {
			return ruleError(0, c.Rule)
		}
		if err := s.take1(sp, c.Key, ns, c.Units(), &out[0]); err != nil {
			out[0] = sluice.Decision{} // an error leaves no decision behind
			return err
		}
		return nil
	}
	return s.takeMulti(ns, checks, out)
}

func (s *Store) hash(sp *algo.Spec, key string) uint64 { return maphash.String(s.seed, key) ^ sp.Hash }

func (s *Store) shard(h uint64) *shard { return &s.shards[h>>s.shift] }

// take1 decides key under sp at cost n and writes the decision to *d
// (see put), which it leaves alone if it errs.
func (s *Store) take1(sp *algo.Spec, key string, now, n int64, d *sluice.Decision) error {
	h := s.hash(sp, key)
	var p probe
	p.init(h, key)
	sh := s.shard(h)
	sh.observe(now)
	sh.mu.RLock()
	if r, ok := sh.find(&p, sp); ok {
		r.cell().touch(stampOf(now))
		r.step(sp, now, n, s.bound, d)
		sh.mu.RUnlock()
		if sp.Kind == algo.KindLog && s.bound.Over() { // its ring grew
			s.relieve(now, h)
		}
		return nil
	}
	sh.mu.RUnlock()
	// A request that leaves a new key idle (a peek, a gate rule's denial, a
	// negative cost, anything on a usage rule of Rate 0) is decided on a
	// fresh state, which is then dropped, as the sweeper would: nothing is
	// stored. A usage rule's denial is recorded, so it is stored.
	if fd := freshDecision(sp, now, n); n <= 0 || !fd.Allowed && (sp.Charge == algo.ChargeGate || sp.Key.Rate == 0) {
		put(d, fd)
		return nil
	}
	sh.mu.Lock()
	r, ok := sh.find(&p, sp)
	if ok {
		r.cell().touch(stampOf(now))
	} else {
		var err error
		if r, err = sh.insert(&p, sp, now); err != nil {
			sh.mu.Unlock()
			return err
		}
	}
	r.step(sp, now, n, s.bound, d)
	sh.mu.Unlock()
	if s.bound.Over() {
		s.relieve(now, h)
	}
	return nil
}

// relieve evicts from the shards, the one of hash h last, while the store
// is over its bounds: keys added to shards with nothing to evict (empty,
// or pinned by a multi-check), or a sliding log's ring that grew, took it
// past them (see bound). It spares the keys used at now, the caller's
// among them, unless there is no other way. The caller holds no shard's
// lock.
func (s *Store) relieve(now int64, h uint64) {
	first := int(h >> s.shift)
	for _, spare := range [2]bool{true, false} {
		for i := 1; i <= len(s.shards) && s.bound.Over(); i++ {
			sh := &s.shards[(first+i)%len(s.shards)]
			sh.mu.Lock()
			sh.trim(now, spare)
			sh.mu.Unlock()
		}
	}
}

// Len returns the number of keys held.
func (s *Store) Len() int { return int(s.bound.Keys()) }

// Bytes returns the bytes counted against the byte bound (see
// WithMaxBytes).
func (s *Store) Bytes() int64 { return s.bound.Bytes() }

// Sweep drops the keys whose state is idle at now, as the background
// sweeper does, and returns how many it dropped. now should be no later
// than the time of any request still to come: a request stamped before now
// finds its key gone and starts afresh.
func (s *Store) Sweep(now time.Time) int {
	ns := now.UnixNano()
	n := 0
	for i := range s.shards {
		n += s.shards[i].sweep(ns)
	}
	return n
}

// sweepSeen sweeps each shard as of the latest time it has seen.
func (s *Store) sweepSeen() {
	for i := range s.shards {
		sh := &s.shards[i]
		if last := sh.last.Load(); last != 0 {
			sh.sweep(last)
		}
	}
}

// Close stops the background sweeper and waits for it to return. Later
// calls to Take return ErrClosed. Close is idempotent and always returns
// nil.
func (s *Store) Close() error {
	s.life.Close()
	return nil
}
