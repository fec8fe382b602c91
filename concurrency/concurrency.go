package concurrency

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/bounded"
)

// Limiter limits the requests in flight per key, the second of Stripe's
// limiters: "at most 20 requests of this customer at once". A request
// Acquires a Lease before it runs and Releases it when done. A lease also
// expires after its ttl, so a holder that dies (a crashed handler, a lost
// connection) gives its place back by itself.
//
// Time is a parameter, as for the rate limiters: Acquire takes now, and a
// lease is counted until Release or until now reaches its expiry.
//
// Memory is bounded: at most WithMaxKeys keys and WithMaxBytes bytes (a
// key with no lease held is not kept), each
// key with at most limit leases. When a new key needs room, its shard
// drops one of its least recently used keys whose leases have all expired
// or, failing that, its least recently used key, whose leases are then
// forgotten, until the new key fits: size the bounds above the keys with
// requests in flight at once. Leases that expire are dropped when their
// key is next used, by the background sweeper (WithSweepInterval), or by
// Sweep.
//
// A Limiter is safe for concurrent use and exact: however calls
// interleave, no key ever has more than limit unexpired leases.
type Limiter struct {
	shards []shard
	shift  uint
	seed   maphash.Seed
	bound  *bounded.Bound
	life   bounded.Sweeper
}

// shard is one part of a Limiter: a map of holders and their
// least-recently-used list, under one mutex.
type shard struct {
	mu    sync.Mutex
	keys  map[string]*holder
	lru   holder         // sentinel: lru.next is the most recently used
	bound *bounded.Bound // the limiter's counts, shared by its shards
	ids   uint64         // the last lease id given out: ids are unique per shard, so per key
	last  int64          // latest time seen, Unix ns: the sweeper's now
	_     [64]byte
}

// holder is one key's leases, sorted by expiry.
type holder struct {
	key        string // a copy of the caller's
	size       int64  // the key's copy's size, as allocated
	grants     []grant
	prev, next *holder
}

// holderBytes is what a key costs a Limiter besides its key's copy,
// for the byte bound: its holder (64 bytes), its first lease (16) and its
// share of the shard's map, which varies as the map grows: 115 to 135
// bytes in all, measured (TestBytesPerKey).
const holderBytes = 128

func (h *holder) bytes() int64 { return holderBytes + h.size }

type grant struct {
	id  uint64
	exp int64 // Unix ns
}

// Lease is a place held by Acquire. The zero Lease holds nothing; it is
// what a denied Acquire returns, and releasing it does nothing.
type Lease struct {
	key string
	id  uint64
	exp int64
}

// Key returns the key the lease was acquired for.
func (l Lease) Key() string { return l.key }

// Expires returns when the lease stops counting if it is not released,
// or the zero Time for the zero Lease.
func (l Lease) Expires() time.Time {
	if l.id == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.exp)
}

// ErrInvalidRequest is wrapped by the error of an Acquire with a negative
// limit or a ttl that is not positive.
var ErrInvalidRequest = errors.New("concurrency: invalid request")

// ErrClosed is returned by Acquire on a closed Limiter.
var ErrClosed = errors.New("concurrency: closed")

// ErrTooLarge is wrapped by the error of an Acquire whose key could never
// fit in the byte bound (WithMaxBytes), even with every other key evicted.
// It wraps sluice.ErrRefused: the request is refused as given, not failed.
var ErrTooLarge = fmt.Errorf("concurrency: key too large for the byte bound: %w", sluice.ErrRefused)

// New returns an empty Limiter, bounded as opts say (WithMaxKeys,
// WithMaxBytes, WithShards, WithSweepInterval); a bad option is an error
// wrapping ErrInvalidOption. Unless WithSweepInterval(0) is given, it
// starts a goroutine that drops expired leases; Close stops it.
func New(opts ...Option) (*Limiter, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Limiter{
		shards: make([]shard, cfg.Shards),
		shift:  cfg.Shift(),
		seed:   maphash.MakeSeed(),
		bound:  cfg.Bound(0),
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.bound = c.bound
		sh.keys = make(map[string]*holder)
		sh.lru.prev, sh.lru.next = &sh.lru, &sh.lru
	}
	c.life.Start(cfg.Sweep, c.sweepSeen)
	return c, nil
}

func (c *Limiter) shard(key string) *shard { return &c.shards[c.index(key)] }

func (c *Limiter) index(key string) int { return int(maphash.String(c.seed, key) >> c.shift) }

// Acquire asks for one of limit places of key at now, to be held for at
// most ttl. If fewer than limit unexpired leases of key are held, it
// returns a new lease and an allowed decision; otherwise the zero Lease and
// a denial whose RetryAfter is when enough leases expire (releases may come
// sooner), or Never when limit is 0. limit may differ from call to call: a
// lowered limit denies until enough leases are gone.
//
// The decision's Limit is limit, Remaining the places left, ResetAfter the
// wait until every lease held has expired. It errs, changing nothing, for
// a negative limit, a ttl that is not positive, a closed limiter, or a key
// that could never fit in the byte bound (ErrTooLarge).
func (c *Limiter) Acquire(now time.Time, key string, limit int64, ttl time.Duration) (Lease, sluice.Decision, error) {
	switch {
	case limit < 0:
		return Lease{}, sluice.Decision{}, fmt.Errorf("%w: limit %d must not be negative", ErrInvalidRequest, limit)
	case ttl <= 0:
		return Lease{}, sluice.Decision{}, fmt.Errorf("%w: ttl %v must be positive", ErrInvalidRequest, ttl)
	case c.life.Closed():
		return Lease{}, sluice.Decision{}, ErrClosed
	}
	// The key's copy is counted at least at its length: most keys too
	// large are refused here, before any lock.
	if err := fits(c.bound, holderBytes+int64(len(key))); err != nil {
		return Lease{}, sluice.Decision{}, err
	}
	ns := now.UnixNano()
	exp := ns + int64(ttl)
	if ns > 0 && exp < ns {
		exp = math.MaxInt64
	}
	i := c.index(key)
	sh := &c.shards[i]
	sh.mu.Lock()
	l, d, added, err := sh.acquire(ns, key, limit, exp)
	sh.mu.Unlock()
	if err != nil {
		return Lease{}, sluice.Decision{}, err
	}
	if added && c.bound.Over() {
		c.relieve(ns, i)
	}
	return l, d, nil
}

// fits returns an error wrapping ErrTooLarge if a key that costs size
// bytes could never fit in b. A Limiter has no fixed structures in its
// bound (Bound(0)), so a key may take all of MaxBytes.
func fits(b *bounded.Bound, size int64) error {
	if size > b.MaxBytes {
		return fmt.Errorf("%w: a key of %d bytes, room for %d", ErrTooLarge, size, b.MaxBytes)
	}
	return nil
}

// acquire is Acquire's body under sh.mu. It reports whether it added a
// key, which may take the limiter past its bounds (see bound). It errs,
// changing nothing, if the key's copy could never fit (fits).
func (sh *shard) acquire(ns int64, key string, limit, exp int64) (Lease, sluice.Decision, bool, error) {
	sh.last = max(sh.last, ns)
	h := sh.keys[key]
	held := 0
	if h != nil {
		h.expire(ns)
		held = len(h.grants)
	}
	d := sluice.Decision{Limit: limit}
	if int64(held) < limit {
		added := h == nil
		if added {
			// The copy is counted as allocated, which may be more than
			// Acquire checked.
			hk, size := bounded.CopyKey(key)
			h = &holder{key: hk, size: size}
			if err := fits(sh.bound, h.bytes()); err != nil {
				return Lease{}, sluice.Decision{}, false, err
			}
			sh.add(h, ns)
		}
		sh.ids++
		g := grant{id: sh.ids, exp: exp}
		h.insert(g)
		sh.touch(h)
		d.Allowed = true
		d.Remaining = limit - int64(held) - 1
		d.ResetAfter = time.Duration(h.grants[len(h.grants)-1].exp - ns)
		return Lease{key: h.key, id: g.id, exp: exp}, d, added, nil
	}
	// Denied: held - limit + 1 leases must go before one fits.
	d.RetryAfter = sluice.Never
	if k := int64(held) - limit + 1; k <= int64(held) {
		d.RetryAfter = time.Duration(h.grants[k-1].exp - ns)
	}
	if h != nil {
		if held == 0 {
			sh.drop(h)
		} else {
			d.ResetAfter = time.Duration(h.grants[held-1].exp - ns)
			sh.touch(h)
		}
	}
	return Lease{}, d, false, nil
}

// relieve evicts from the shards, shard first last, while the limiter is
// over its bounds: a shard that had nothing to evict for a new key took it
// past them (see bound). It spares each shard's most recently used key,
// the caller's among them, unless there is no other way. The caller holds
// no shard's lock.
func (c *Limiter) relieve(now int64, first int) {
	for _, spare := range [2]bool{true, false} {
		for i := 1; i <= len(c.shards) && c.bound.Over(); i++ {
			sh := &c.shards[(first+i)%len(c.shards)]
			sh.mu.Lock()
			for c.bound.Over() {
				v := sh.victim(now)
				if v == nil || spare && v == sh.lru.next {
					break
				}
				sh.drop(v)
			}
			sh.mu.Unlock()
		}
	}
}

// Release gives back the place l holds and reports whether it was still
// held: false for the zero Lease, a lease released before, and a lease
// that expired (or whose key was evicted) and was dropped.
func (c *Limiter) Release(l Lease) bool {
	if l.id == 0 {
		return false
	}
	sh := c.shard(l.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	h := sh.keys[l.key]
	if h == nil {
		return false
	}
	for i, g := range h.grants {
		if g.id == l.id {
			h.grants = append(h.grants[:i], h.grants[i+1:]...)
			if len(h.grants) == 0 {
				sh.drop(h)
			}
			return true
		}
	}
	return false
}

// InFlight returns the number of unexpired leases of key at now.
func (c *Limiter) InFlight(now time.Time, key string) int64 {
	ns := now.UnixNano()
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	h := sh.keys[key]
	if h == nil {
		return 0
	}
	n := int64(0)
	for _, g := range h.grants {
		if g.exp > ns {
			n++
		}
	}
	return n
}

// Len returns the number of keys with leases held (some perhaps expired
// and not yet dropped).
func (c *Limiter) Len() int { return int(c.bound.Keys()) }

// Bytes returns the bytes counted against the byte bound (see
// WithMaxBytes).
func (c *Limiter) Bytes() int64 { return c.bound.Bytes() }

// Sweep drops the leases expired at now, and the keys left with none, and
// returns how many keys it dropped.
func (c *Limiter) Sweep(now time.Time) int {
	ns := now.UnixNano()
	n := 0
	for i := range c.shards {
		n += c.shards[i].sweep(ns)
	}
	return n
}

func (c *Limiter) sweepSeen() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		last := sh.last
		sh.mu.Unlock()
		if last != 0 {
			sh.sweep(last)
		}
	}
}

// Close stops the background sweeper and waits for it to return. Later
// calls to Acquire return ErrClosed; Release still works. Close is
// idempotent and always returns nil.
func (c *Limiter) Close() error {
	c.life.Close()
	return nil
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for _, h := range sh.keys {
		if h.expire(now); len(h.grants) == 0 {
			sh.drop(h)
			n++
		}
	}
	return n
}

// lruScan is how far from the cold end of the list victim looks for a key
// with nothing in flight before it picks the coldest key outright.
const lruScan = 8

// victim picks the key to evict: of the lruScan least recently used, the
// coldest with no lease unexpired at now, else the coldest; nil if the
// shard holds none. The caller holds sh.mu.
func (sh *shard) victim(now int64) *holder {
	if sh.lru.prev == &sh.lru {
		return nil
	}
	for h, i := sh.lru.prev, 0; h != &sh.lru && i < lruScan; h, i = h.prev, i+1 {
		if h.expire(now); len(h.grants) == 0 {
			return h
		}
	}
	return sh.lru.prev
}

// add adds h, a new key's holder, counted in the bound, making room in
// the shard first, until the key fits, if the limiter is at its bounds; a
// shard with nothing left to evict adds it over them (see bound). The
// caller holds sh.mu.
func (sh *shard) add(h *holder, now int64) {
	dk, db := int64(1), h.bytes()
	for !sh.bound.Take(dk, db) {
		v := sh.victim(now)
		if v == nil {
			sh.bound.Force(dk, db)
			break
		}
		dk, db = dk-1, db-v.bytes()
		sh.unlink(v) // the new key takes over its counts
	}
	sh.keys[h.key] = h
	h.prev, h.next = &sh.lru, sh.lru.next
	h.next.prev, sh.lru.next = h, h
}

// touch moves h to the front of the list.
func (sh *shard) touch(h *holder) {
	h.prev.next, h.next.prev = h.next, h.prev
	h.prev, h.next = &sh.lru, sh.lru.next
	h.next.prev, sh.lru.next = h, h
}

// drop forgets h and uncounts it.
func (sh *shard) drop(h *holder) {
	sh.unlink(h)
	sh.bound.Force(-1, -h.bytes())
}

func (sh *shard) unlink(h *holder) {
	h.prev.next, h.next.prev = h.next, h.prev
	h.prev, h.next = nil, nil
	delete(sh.keys, h.key)
}

// expire drops the grants expired at now: those at the front.
func (h *holder) expire(now int64) {
	i := 0
	for i < len(h.grants) && h.grants[i].exp <= now {
		i++
	}
	if i > 0 {
		h.grants = append(h.grants[:0], h.grants[i:]...)
	}
}

// insert adds g, keeping the grants sorted by expiry. Leases of one ttl
// taken in time order land at the end at once.
func (h *holder) insert(g grant) {
	i := len(h.grants)
	h.grants = append(h.grants, g)
	for i > 0 && h.grants[i-1].exp > g.exp {
		h.grants[i] = h.grants[i-1]
		i--
	}
	h.grants[i] = g
}
