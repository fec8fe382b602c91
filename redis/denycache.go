package redis

import (
	"context"
	"hash/fnv"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// denyCache remembers denials until their RetryAfter, so that a flood
// against one key is answered locally. It is exact in what matters: a
// denial of cost n at t says that no request of cost n is allowed before
// t+RetryAfter, whatever else comes (other requests only charge), so the
// cache never denies what Redis would allow — except on a store whose
// requests may be split (a Cluster, a Ring, a Pair's), where a denial may
// be caused by another request's charge that is given back a moment later
// (see Requests across slots): there an entry lives at most as long as a
// give-back can take (capDenials), not the denial's whole RetryAfter. Its
// RetryAfter and ResetAfter
// are Redis's, shifted by the time since; if other processes charged the
// key meanwhile, the true waits are longer. Remaining is as of the
// denial. A request of this process charged on the key drops the entry. The times are the callers' now; with Redis TIME, the
// now a request was sent with is no later than the time Redis decided it,
// so an entry expires no later than the denial does.
//
// It is bounded: a fixed number of shards of at most per entries each;
// a full shard drops its expired entries and then arbitrary ones.
type denyCache struct {
	seed   maphash.Seed
	per    int
	shards [16]denyShard
}

type denyShard struct {
	mu sync.Mutex
	m  map[denyKey]*denyEntry
}

// denyKey names the state a denial is about: its Redis key, the limit
// it was decided under (a new limit may allow sooner) and the rule's
// charge (a peek, of cost 0, asks for one unit left under ChargeUsage,
// for no debt under ChargeCount, and for nothing under ChargeGate).
type denyKey struct {
	key    string
	limit  sluice.Limit
	charge algo.Charge
}

type denyEntry struct {
	at    time.Time       // the request's now
	until time.Time       // at + RetryAfter
	n     int64           // the denied cost
	d     sluice.Decision // the check's decision
	sig   uint64          // the whole request's checks and costs
	all   []sluice.Decision
}

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(size/16, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[denyKey]*denyEntry)
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns the live denial of k that covers a request of cost n at t.
func (c *denyCache) get(k denyKey, t time.Time, n int64) *denyEntry {
	s := c.shard(k.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[k]
	switch {
	case e == nil:
		return nil
	case !t.Before(e.until):
		delete(s.m, k)
		return nil
	case t.Before(e.at) || n != e.n:
		// An earlier time or a smaller cost may be allowed; a larger one
		// is denied too, but for longer than the entry says.
		return nil
	}
	return e
}

// drop forgets k: a request on it was charged, so its denial is stale.
func (c *denyCache) drop(k denyKey) {
	s := c.shard(k.key)
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// put remembers a denial.
func (c *denyCache) put(k denyKey, e *denyEntry) {
	s := c.shard(k.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.per {
		for k2, e2 := range s.m {
			if !e.at.Before(e2.until) {
				delete(s.m, k2)
			}
		}
		for k2 := range s.m {
			if len(s.m) < c.per {
				break
			}
			delete(s.m, k2)
		}
	}
	s.m[k] = e
}

// len counts the entries, for tests.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// since shifts a cached decision to elapsed after it was made: the waits
// are shorter by elapsed; the rest is as Redis said, and it is marked
// Cached.
func since(d sluice.Decision, elapsed time.Duration) sluice.Decision {
	d.Cached = true
	if d.RetryAfter != sluice.Never {
		d.RetryAfter = max(d.RetryAfter-elapsed, 0)
	}
	if d.ResetAfter != sluice.Never {
		d.ResetAfter = max(d.ResetAfter-elapsed, 0)
	}
	return d
}

// signature identifies a request: its keys and its checks' costs.
func signature(p *pending) uint64 {
	h := fnv.New64a()
	for _, k := range p.keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	var b [8]byte
	for _, a := range p.args {
		for i := range b {
			b[i] = byte(a.cost >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum64()
}

// cacheLayer is a transport behind the deny cache: a request that a
// remembered denial covers is answered without Redis; the others go to
// the next transport, and their denials are remembered.
type cacheLayer struct {
	transport // the next; its parts and moved are the next's
	c         *denyCache
	hits      *atomic.Int64 // requests answered from the cache
	clock     sluice.Clock  // the cache's time without the caller's
	// callerTime is set when the request's own time decides it.
	callerTime bool
	// cap, if not 0, bounds how long a denial is cached, in ns: see
	// Store.capDenials.
	cap atomic.Int64
}

func (cl *cacheLayer) decide(ctx context.Context, p *pending, out []sluice.Decision) error {
	now := cl.now(p)
	if cl.cached(now, p, out) {
		return nil
	}
	if err := cl.transport.decide(ctx, p, out); err != nil {
		return err
	}
	cl.remember(now, p, out)
	return nil
}

// now is the cache's time for p (see Deadlines and clocks in the package
// documentation): the caller's when it decides, in µs as the script reads
// it (a denial's RetryAfter counts from there), else the clock's, read
// before sending, so no later than Redis's decision.
func (cl *cacheLayer) now(p *pending) time.Time {
	if cl.callerTime {
		return time.UnixMicro(int64(p.now))
	}
	return cl.clock.Now()
}

// cacheable reports whether the denial cache may answer or learn from p:
// whether every gate check of p costs more than 0 (a peek is never
// denied, and a denial of cost 0 would say nothing), and every check of a
// rule charged by usage costs 0: a usage charge is recorded whether it
// fits or not, so it always goes to Redis, while a peek is denied as long
// as the debt lasts, and a denial of one holds as a charge's does.
func cacheable(p *pending) bool {
	for _, a := range p.args {
		if a.p.charge == algo.ChargeGate && a.cost <= 0 || a.p.charge != algo.ChargeGate && a.cost != 0 {
			return false
		}
	}
	return true
}

// cached answers the request p from a remembered denial of one of its
// enforced checks, if there is one. The same request gets the decisions
// Redis gave, shifted in time; another one gets the denying check's
// decision and, for the checks not consulted, their full quota. Every
// decision it writes is marked Cached, so that the caller can count the
// denials that reached no Redis.
func (cl *cacheLayer) cached(now time.Time, p *pending, out []sluice.Decision) bool {
	if !cacheable(p) {
		return false
	}
	n := len(p.args)
	for i, a := range p.args {
		if a.shadow {
			continue
		}
		e := cl.c.get(denyKey{p.keys[i], a.p.limit, a.p.charge}, now, a.cost)
		if e == nil {
			continue
		}
		cl.hits.Add(1)
		el := now.Sub(e.at)
		if len(e.all) == n && e.sig == signature(p) {
			for j := range n {
				out[j] = since(e.all[j], el)
			}
			return true
		}
		for j := range n {
			q := p.args[j].p.quota
			out[j] = sluice.Decision{Allowed: true, Limit: q, Remaining: q, Cached: true}
		}
		out[i] = since(e.d, el)
		return true
	}
	return false
}

// remember caches the denials of the request p's enforced checks.
func (cl *cacheLayer) remember(now time.Time, p *pending, out []sluice.Decision) {
	if !cacheable(p) {
		return
	}
	var all []sluice.Decision
	var sig uint64
	for i, a := range p.args {
		d := out[i]
		k := denyKey{p.keys[i], a.p.limit, a.p.charge}
		if d.Allowed {
			cl.c.drop(k)
		}
		if a.shadow || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter == sluice.Never {
			continue
		}
		if all == nil {
			all = append([]sluice.Decision(nil), out[:len(p.args)]...)
			sig = signature(p)
		}
		until := now.Add(d.RetryAfter)
		if max := time.Duration(cl.cap.Load()); max > 0 && d.RetryAfter > max {
			until = now.Add(max)
		}
		cl.c.put(k, &denyEntry{
			at: now, until: until, n: a.cost, d: d, sig: sig, all: all,
		})
	}
}
