package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// ErrFull is wrapped by the Store's error for a new key it has no room
// for: every key it holds was used within its TTL. It wraps
// sluice.ErrNoRoom, so a Limiter decides the request by its rules'
// failure modes; a key in use is never dropped to make room.
var ErrFull = fmt.Errorf("lease: store full: %w", sluice.ErrNoRoom)

// ErrExpired is wrapped by the Store's error for a leased check whose
// key's lease has expired and could not be renewed: the authority did not
// answer for a TTL. A Limiter decides it by the rule's failure mode.
var ErrExpired = errors.New("lease: lease expired")

// ErrClosed is returned by a Store used after Close.
var ErrClosed = errors.New("lease: store closed")

// ErrTimeout is wrapped by the Store's error for a leased check whose
// key's first grant did not come within the Store's timeout (WithTimeout).
// A Limiter decides it by the rule's failure mode.
var ErrTimeout = fmt.Errorf("lease: no grant in time: %w", context.DeadlineExceeded)

// Store is a sluice.Store that decides the checks of leased rules
// (Rule.Lease.Enabled) locally, on shares leased from an Authority, and
// hands the others to an exact store. It is safe for concurrent use.
//
// A request mixing leased and exact checks stays all-or-nothing: the
// leased checks are decided, and charged, locally first, then the exact
// ones in the exact store (as peeks, for its gate checks, when a leased
// check already denied the request); if the request is denied, the local
// charges are given back.
//
// Renewals run in the background, one per key at a time, in at most
// WithMaxRenewals calls to the authority at once; a renewal that finds
// them all out waits for one to end, the key on its current lease. When
// the authority is a Batcher (Redis's is), a routine renewal waits a few
// milliseconds for others, and one call renews them all: the shared
// store runs one script for many keys. A key with no live lease has its
// first request wait for a grant, bounded by ctx and WithTimeout; at
// most half of WithMaxRenewals such requests wait at once, so that a
// flood of new keys leaves the live leases room to renew. Past that, a
// request is shed (sluice.ErrShed); with the authority failing it gets
// the authority's error, and with it late (a request gave up on a grant
// still out) ErrTimeout, so that the Limiter applies the rule's failure
// mode. A key whose renewals fail keeps deciding on its lease until the
// lease expires, then answers ErrExpired.
type Store struct {
	exact   sluice.Store
	auth    Authority
	id      string
	maxKeys int
	timeout time.Duration // a request's wait for a first grant; 0: its context's
	slots   chan struct{} // one token per call to the authority in flight
	firsts  chan struct{} // one token per grant in flight for a key with no live lease
	late    atomic.Int64  // entries whose renewal in flight a request gave up waiting for
	batcher Batcher       // the authority, if it renews keys together

	qmu   sync.Mutex // guards queue and armed; taken last
	queue []*renewal // renewals not yet sent
	armed bool       // a timer will send the queue

	mu   sync.RWMutex // guards keys, swept, releasing and entries' holders; taken before an entry's
	keys map[entryKey]*entry
	// releasing holds, per authority key, the release in flight of a
	// swept entry: a new entry's first renewal waits for it, so that a
	// late release does not forget the new entry's share.
	releasing map[string]chan struct{}
	swept     int64 // when the table was last swept for idle keys, ns

	life   sync.Mutex // orders wg.Add after closed is read; taken last
	closed atomic.Bool
	wg     sync.WaitGroup

	ctx    context.Context // the renewals', canceled by Close
	cancel context.CancelFunc
}

var (
	_ sluice.Store       = (*Store)(nil)
	_ sluice.RuleChecker = (*Store)(nil)
)

// entry is one key's lease.
type entry struct {
	key, rule, ckey string // the authority's key, the rule's name, the check's key

	mu      sync.Mutex
	h       *holder // swapped only with the Store's mu held too
	made    leaseOf // the rule h was made for
	used    int64   // the last request, ns
	pending *Grant  // a grant the background brought, applied at the next request
	sentAt  int64   // the pending grant's send time
	done    chan struct{}
	late    bool          // a request gave up waiting for the renewal in flight (WithTimeout)
	err     error         // the last renewal's
	dropped bool          // removed from the table: a request that finds it looks again
	after   chan struct{} // closed when the release of the key's previous entry is done
}

// Option configures a Store: WithHolder, WithMaxKeys, WithMaxRenewals,
// WithTimeout.
type Option func(*Store) error

// WithHolder sets the id the Store holds its leases under, which must be
// unique among the processes sharing the authority. The default is random.
func WithHolder(id string) Option {
	return func(s *Store) error {
		if id == "" || len(id) > maxHolderBytes {
			return fmt.Errorf("lease: holder id of %d bytes (want 1 to %d)", len(id), maxHolderBytes)
		}
		s.id = id
		return nil
	}
}

// WithMaxKeys bounds the keys the Store holds leases on. The default is
// 10,000.
func WithMaxKeys(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("lease: max keys %d must be positive", n)
		}
		s.maxKeys = n
		return nil
	}
}

// WithMaxRenewals bounds the calls in flight towards the authority (a
// Batcher's renews up to 64 keys), and at half of it, the requests that
// wait for a key's first grant. The default is 64.
func WithMaxRenewals(n int) Option {
	return func(s *Store) error {
		if n <= 0 {
			return fmt.Errorf("lease: max renewals %d must be positive", n)
		}
		s.slots, s.firsts = make(chan struct{}, n), make(chan struct{}, max(n/2, 1))
		return nil
	}
}

// WithTimeout bounds how long a request waits for its key's first grant,
// when its context would let it wait longer: past d it errs (ErrTimeout),
// and its rules' failure modes decide it, while the grant is still sought
// for the key's next request. Without the bound a request could wait for
// as long as the call to the authority may take, which is a lease's TTL.
// The default is the authority's own timeout, when it has a Timeout
// method (the Redis store's, see redis.WithTimeout), else none: the
// memory authority answers as soon as it is scheduled. 0 leaves the wait
// to the request's context.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("lease: timeout %v must not be negative", d)
		}
		s.timeout = d
		return nil
	}
}

// timeouter is an authority that bounds its calls by a timeout of its
// own, which a Store takes as its default.
type timeouter interface{ Timeout() time.Duration }

// New returns a Store deciding leased rules on shares from a and the
// others in exact. Close it to give its leases back.
func New(exact sluice.Store, a Authority, opts ...Option) (*Store, error) {
	if exact == nil || a == nil {
		return nil, errors.New("lease: New needs an exact store and an authority")
	}
	s := &Store{exact: exact, auth: a, maxKeys: 10_000, slots: make(chan struct{}, 64), firsts: make(chan struct{}, 32),
		keys: make(map[entryKey]*entry), releasing: make(map[string]chan struct{})}
	if t, ok := a.(timeouter); ok {
		s.timeout = t.Timeout()
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		s.id = hex.EncodeToString(b[:])
	}
	s.batcher, _ = a.(Batcher)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Holder returns the id the Store holds its leases under.
func (s *Store) Holder() string { return s.id }

// CheckRule implements sluice.RuleChecker: a leased rule is the Store's
// (Rule.Validate has checked its lease); any other, the exact store's.
func (s *Store) CheckRule(r *sluice.PreparedRule) error {
	if leased(r) {
		return nil
	}
	if rc, ok := s.exact.(sluice.RuleChecker); ok {
		return rc.CheckRule(r)
	}
	return nil
}

func leased(r *sluice.PreparedRule) bool { return r != nil && r.Rule().Lease.Enabled }

// Take implements sluice.Store.
func (s *Store) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(out) < len(checks) {
		return fmt.Errorf("lease: %d decisions for %d checks", len(out), len(checks))
	}
	var buf [8]int
	ls := buf[:0] // the leased checks
	for i := range checks {
		if leased(checks[i].Rule) {
			ls = append(ls, i)
		}
	}
	if len(ls) == 0 {
		return s.exact.Take(ctx, now, checks, out)
	}
	ns := now.UnixNano()
	var tbuf [8]taken
	es := tbuf[:0]
	allowed := true
	for _, i := range ls {
		c := &checks[i]
		tk, err := s.decide(ctx, ns, c, &out[i])
		if err != nil {
			s.refund(ns, checks, out, ls[:len(es)], es)
			return err
		}
		es = append(es, tk)
		allowed = allowed && (c.Rule.Shadow() || out[i].Allowed)
	}
	if len(ls) < len(checks) {
		ok, err := s.takeExact(ctx, now, checks, out, allowed)
		if err != nil {
			s.refund(ns, checks, out, ls, es)
			return err
		}
		allowed = allowed && ok
	}
	if !allowed {
		s.refund(ns, checks, out, ls, es)
	}
	return nil
}

// taken is a leased check's local charge: the entry, and the holder and
// the lease or window it charged, which its refund must still find.
type taken struct {
	e *entry
	h *holder
	c charge
}

// decide decides one leased check on its key's lease, making sure of a
// lease first.
func (s *Store) decide(ctx context.Context, ns int64, c *sluice.Check, d *sluice.Decision) (taken, error) {
	n := c.Units()
	for {
		e, err := s.entry(c, ns)
		if err != nil {
			return taken{}, err
		}
		e.mu.Lock()
		if e.dropped {
			e.mu.Unlock()
			continue
		}
		if err := s.ensure(ctx, e, ns); err != nil {
			e.mu.Unlock()
			return taken{}, err
		}
		e.used = max(e.used, ns)
		tk := taken{e: e, h: e.h}
		if n < 0 {
			e.h.begin(ns)
			*d = sluice.Decision{Limit: e.h.quota, RetryAfter: sluice.Never}
		} else {
			tk.c = e.h.decide(ns, n, d)
			if !d.Allowed && e.h.due(ns) {
				// Denied on a share that quota left free could
				// grow: renew now rather than at the next request.
				_ = s.renew(e, ns, false)
			}
		}
		e.mu.Unlock()
		return tk, nil
	}
}

// ensure makes sure e has a live lease at ns, with e.mu held, which it
// may release while it waits for a first grant. It starts a renewal when
// one is due.
func (s *Store) ensure(ctx context.Context, e *entry, ns int64) error {
	s.settle(e, ns)
	if e.h.live(ns) {
		if e.h.due(ns) {
			_ = s.renew(e, ns, false) // errs only once closed
		}
		return nil
	}
	if !e.h.inflight {
		if err := s.renew(e, ns, true); err != nil {
			return err
		}
	}
	done := e.done
	e.mu.Unlock()
	var late <-chan time.Time
	if s.timeout > 0 {
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		late = t.C
	}
	timedOut := false
	select {
	case <-done:
	case <-ctx.Done():
		e.mu.Lock()
		return ctx.Err()
	case <-late:
		timedOut = true
	}
	e.mu.Lock()
	// The grant may have come as the wait ended: then it is taken, and
	// the renewal, done, is not counted late.
	if timedOut && !closed(done) {
		if !e.late && e.done == done {
			e.late = true
			s.late.Add(1)
		}
		return fmt.Errorf("lease: grant of %q: %w (%v)", e.key, ErrTimeout, s.timeout)
	}
	s.settle(e, ns)
	if !e.h.live(ns) {
		if e.err != nil {
			return fmt.Errorf("lease: renewing %q: %w", e.key, e.err)
		}
		return fmt.Errorf("%w: key %q", ErrExpired, e.key)
	}
	return nil
}

// settle applies a grant the background brought, with e.mu held.
func (s *Store) settle(e *entry, ns int64) {
	if e.pending != nil {
		e.h.apply(*e.pending, e.sentAt, ns)
		e.pending = nil
	}
}

// renew starts e's renewal at ns in the background, with e.mu held. A
// first grant (must: e has no live lease, and its request waits) takes a
// slot of firsts until it is done, or errs with none free: ErrShed while
// the authority answers, so that a flood of new keys is denied, and
// ErrTimeout while a renewal some request gave up waiting for is still
// out, so that an authority that does not answer has the rules' failure
// modes decide, as its answering late would.
func (s *Store) renew(e *entry, ns int64, must bool) error {
	if must {
		select {
		case s.firsts <- struct{}{}:
		default:
			if s.late.Load() > 0 {
				return fmt.Errorf("lease: first grant of %q: %w: the authority is late with others", e.key, ErrTimeout)
			}
			return fmt.Errorf("lease: first grant of %q: %w", e.key, sluice.ErrShed)
		}
	}
	if !s.start() {
		if must {
			<-s.firsts
		}
		return ErrClosed
	}
	q := &renewal{e: e, h: e.h, ns: ns, must: must, done: make(chan struct{}), after: e.after, queued: time.Now()}
	q.r = q.h.request(ns, e.key, s.id)
	e.done = q.done
	s.enqueue(q)
	return nil
}

// renewal is one key's renewal on its way: queued, or in a call to the
// authority.
type renewal struct {
	e     *entry
	h     *holder // the holder it was sent for
	r     Request
	ns    int64
	must  bool
	done  chan struct{}
	after chan struct{} // a late release it waits for, or nil
	// queued is when it was queued, on the system clock, which bounds
	// its call (the lease counts from ns, on the requests' clock).
	queued time.Time
	g      Grant
	err    error
}

// maxBatch bounds the renewals of one call to a Batcher.
const maxBatch = 64

// enqueue queues q. A first grant is sent at once, with whatever waits;
// so is every renewal when the authority is no Batcher. Else a routine
// renewal waits a sixteenth of its Renew (1ms to 10ms) for others to go
// with: that delay, small beside a lease's TTL, lets one call renew many
// keys.
func (s *Store) enqueue(q *renewal) {
	s.qmu.Lock()
	s.queue = append(s.queue, q)
	now := q.must || s.batcher == nil
	if !now && !s.armed {
		s.armed = true
		wait := min(max(time.Duration(q.h.renew/16), time.Millisecond), 10*time.Millisecond)
		time.AfterFunc(wait, func() {
			s.qmu.Lock()
			s.armed = false
			s.qmu.Unlock()
			s.send()
		})
	}
	s.qmu.Unlock()
	if now {
		s.send()
	}
}

// send starts a call for the queued renewals, while a slot is free: as
// many in one call as a Batcher takes, else one. A renewal waiting for a
// late release stays queued; the release's end sends it, as a call's end
// sends what queued meanwhile.
func (s *Store) send() {
	for {
		s.qmu.Lock()
		if len(s.queue) == 0 {
			s.qmu.Unlock()
			return
		}
		// The slot first: the queue is split in place, which only a
		// call about to start may do.
		select {
		case s.slots <- struct{}{}:
		default:
			s.qmu.Unlock()
			return
		}
		n := 1
		if s.batcher != nil {
			n = maxBatch
		}
		var batch []*renewal
		rest := s.queue[:0]
		for _, q := range s.queue {
			if len(batch) < n && (q.after == nil || closed(q.after)) {
				batch = append(batch, q)
			} else {
				rest = append(rest, q)
			}
		}
		clear(s.queue[len(rest):])
		s.queue = rest
		s.qmu.Unlock()
		if len(batch) == 0 {
			<-s.slots // every renewal queued waits for a release
			return
		}
		go s.call(batch)
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// call renews batch at the authority, in one call if it is a Batcher,
// then hands each renewal's grant or error to its entry. A grant that
// comes after the TTL would expire on arrival: the call gives up at the
// soonest TTL of its renewals, counted from their queueing, so that a
// hung authority frees its slot.
func (s *Store) call(batch []*renewal) {
	end := batch[0].queued.Add(batch[0].r.TTL)
	for _, q := range batch[1:] {
		if e := q.queued.Add(q.r.TTL); e.Before(end) {
			end = e
		}
	}
	ctx, cancel := context.WithDeadline(s.ctx, end)
	if len(batch) == 1 {
		batch[0].g, batch[0].err = s.auth.Renew(ctx, batch[0].r)
	} else {
		rs, gs, errs := make([]Request, len(batch)), make([]Grant, len(batch)), make([]error, len(batch))
		for i, q := range batch {
			rs[i] = q.r
		}
		s.batcher.RenewBatch(ctx, rs, gs, errs)
		for i, q := range batch {
			q.g, q.err = gs[i], errs[i]
		}
	}
	cancel()
	<-s.slots
	for _, q := range batch {
		s.finish(q)
	}
	s.send()
}

// finish hands q's grant or error to its entry, unless the entry's rule
// changed meanwhile and its lease started over.
func (s *Store) finish(q *renewal) {
	defer s.wg.Done()
	if q.must {
		// Before the waiter wakes, so that a first grant it asks next
		// finds the place free.
		<-s.firsts
	}
	e := q.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.late && e.done == q.done {
		e.late = false
		s.late.Add(-1)
	}
	if e.h == q.h {
		e.err = q.err
		if q.err != nil {
			q.h.fail()
		} else {
			e.pending, e.sentAt = &q.g, q.ns
		}
	}
	close(q.done)
}

// start counts a goroutine about to start, unless the Store is closed.
func (s *Store) start() bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return false
	}
	s.wg.Add(1)
	return true
}

// takeExact decides the exact checks in the exact store: as they are if
// the leased checks allowed the request, else with its gate checks as
// peeks, so that they charge nothing. It reports whether they allow.
func (s *Store) takeExact(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision, allowed bool) (bool, error) {
	var cbuf [8]sluice.Check
	var dbuf [8]sluice.Decision
	xs := cbuf[:0]
	for i := range checks {
		if c := checks[i]; !leased(c.Rule) {
			if !allowed && c.Rule != nil && c.Rule.Rule().Charge == sluice.ChargeGate && c.Units() >= 0 {
				c.Peek, c.Cost = true, 0
			}
			xs = append(xs, c)
		}
	}
	xd := dbuf[:0]
	if len(xs) > len(dbuf) {
		xd = make([]sluice.Decision, len(xs))
	}
	xd = xd[:len(xs)]
	if err := s.exact.Take(ctx, now, xs, xd); err != nil {
		return false, err
	}
	ok := true
	j := 0
	for i := range checks {
		if !leased(checks[i].Rule) {
			out[i] = xd[j]
			ok = ok && (checks[i].Rule.Shadow() || xd[j].Allowed)
			j++
		}
	}
	return ok, nil
}

// refund gives back the local charges of the leased checks ls (charged
// as es) of a request that was denied or failed; a check that allowed
// reports its state uncharged. A charge whose holder was replaced since
// (the rule changed) is not given back: the new lease never had it.
func (s *Store) refund(ns int64, checks []sluice.Check, out []sluice.Decision, ls []int, es []taken) {
	for k, tk := range es {
		i := ls[k]
		n := checks[i].Units()
		if !out[i].Allowed || n <= 0 {
			continue
		}
		tk.e.mu.Lock()
		if tk.e.h == tk.h {
			tk.h.refund(ns, n, tk.c)
		}
		tk.e.mu.Unlock()
		out[i].Remaining += n
	}
}

// leaseOf is what a holder is made from: a rule changed in any of these
// under the same name starts its keys' leases over.
type leaseOf struct {
	algo  sluice.Algo
	limit sluice.Limit
	lease sluice.Lease
}

// entryKey finds an entry: the rule's name and the check's key.
type entryKey struct{ rule, key string }

// entry returns the check's key's entry, adding it if need be.
func (s *Store) entry(c *sluice.Check, ns int64) (*entry, error) {
	r := c.Rule.Rule()
	key := entryKey{r.Name, c.Key}
	made := leaseOf{r.Algorithm, r.Limit, r.Lease}
	s.mu.RLock()
	e := s.keys[key]
	ok := e != nil && e.made == made
	s.mu.RUnlock()
	if ok {
		return e, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	e = s.keys[key]
	if e == nil {
		if len(s.keys) >= s.maxKeys {
			s.sweep(ns)
		}
		if len(s.keys) >= s.maxKeys {
			return nil, fmt.Errorf("%w: %d keys in use", ErrFull, len(s.keys))
		}
		// Used from its making, so that a sweep while its first request
		// waits for the first grant does not take it for idle.
		ak := AuthorityKey(r.Name, c.Key)
		if len(ak) > MaxKeyBytes {
			return nil, fmt.Errorf("lease: key of %d bytes with rule %q's name, past %d: %w", len(ak), r.Name, MaxKeyBytes, sluice.ErrRefused)
		}
		e = &entry{key: ak, rule: r.Name, ckey: c.Key, used: ns}
		e.after = s.releasing[e.key]
		s.keys[key] = e
	}
	if e.h == nil || e.made != made {
		// A new key, or a rule changed under the same name: its lease
		// starts over. The holder is swapped under the entry's lock.
		renew, ttl := r.Lease.Times(r.Limit.Period)
		h := newHolder(kindOf(r), r.Limit, c.Rule.Quota(), renew, ttl)
		e.mu.Lock()
		e.h, e.made, e.pending = h, made, nil
		e.mu.Unlock()
	}
	return e, nil
}

func kindOf(r sluice.Rule) Kind {
	if info, _ := r.Algorithm.Info(); info.Bucket {
		return Bucket
	}
	return Window
}

// sweep drops the idle entries, with s.mu held, at most once per 50ms of
// the requests' time: those with no request for a TTL, and for a Window
// holder none in its current window either, so that the authority never
// forgets units it admitted in a window still open. It gives their leases
// back if a renewal slot is free; else they expire.
func (s *Store) sweep(ns int64) {
	if ns-s.swept < int64(50*time.Millisecond) && s.swept != 0 {
		return
	}
	s.swept = ns
	for k, e := range s.keys {
		e.mu.Lock()
		s.settle(e, ns) // a grant that came after the key's last request
		idle := !e.h.inflight && ns-e.used >= e.h.ttl &&
			(e.h.kind == Bucket || floorDiv(e.used, e.h.period) < floorDiv(ns, e.h.period))
		if idle {
			e.dropped = true
			delete(s.keys, k)
			if e.h.held {
				s.release(e.key, time.Duration(e.h.ttl))
			}
		}
		e.mu.Unlock()
	}
}

// release gives back a lease in the background if a slot is free, with
// s.mu held, giving up after ttl, when the lease has lapsed anyway. Until
// it is done, a new entry for key waits for it (entry.after).
func (s *Store) release(key string, ttl time.Duration) {
	select {
	case s.slots <- struct{}{}:
	default:
		return
	}
	if !s.start() {
		<-s.slots
		return
	}
	done := make(chan struct{})
	s.releasing[key] = done
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, ttl)
		_ = s.auth.Release(ctx, key, s.id)
		cancel()
		s.mu.Lock()
		if s.releasing[key] == done {
			delete(s.releasing, key)
		}
		s.mu.Unlock()
		close(done)
		<-s.slots
		// Renewals may wait for its slot, and a renewal of the key's new
		// entry for its end.
		s.send()
	}()
}

// Held is one of a Store's leases, as Leases reports it.
type Held struct {
	Rule string // the rule's name
	Key  string // the check's key
	// AuthorityKey is the lease's key at the authority, for
	// Authority.Holdings.
	AuthorityKey string
	Kind         Kind
	// Share, Burst and Allowance are the last grant's; Holders the key's
	// holders it counted.
	Share, Burst, Allowance int64
	Holders                 int
	// Demand is what the Store last reported: units asked per Period.
	Demand  int64
	Expires time.Time
	// Renewing says a renewal is in flight, or its grant not yet applied
	// (it is, at the key's next request).
	Renewing bool
}

// Leases lists the Store's leases, by rule and key: every key it holds
// a grant for, with the grant's expiry.
func (s *Store) Leases() []Held {
	s.mu.Lock()
	es := make([]*entry, 0, len(s.keys))
	for _, e := range s.keys {
		es = append(es, e)
	}
	s.mu.Unlock()
	out := make([]Held, 0, len(es))
	for _, e := range es {
		e.mu.Lock()
		if h := e.h; h.held {
			out = append(out, Held{Rule: e.rule, Key: e.ckey, AuthorityKey: e.key, Kind: h.kind, Share: h.share, Burst: h.burst, Allowance: h.allowance,
				Holders: h.holders, Demand: h.demand, Expires: time.Unix(0, h.expires), Renewing: h.inflight})
		}
		e.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Held) int {
		return cmpStrings(a.Rule, b.Rule, a.Key, b.Key)
	})
	return out
}

func cmpStrings(a1, b1, a2, b2 string) int {
	if c := strings.Compare(a1, b1); c != 0 {
		return c
	}
	return strings.Compare(a2, b2)
}

// Close gives back every lease and stops the renewals, waiting for them
// at most until ctx ends. The Store refuses requests afterwards. The
// authority still counts what a fixed window lease admitted in its window
// until the window ends (Authority.Release).
func (s *Store) Close(ctx context.Context) error {
	s.life.Lock()
	was := s.closed.Swap(true)
	s.life.Unlock()
	if was {
		return nil
	}
	s.mu.Lock()
	es := make([]*entry, 0, len(s.keys))
	for _, e := range s.keys {
		es = append(es, e)
	}
	s.mu.Unlock()
	stopped := make(chan struct{})
	go func() { s.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.cancel()
		return ctx.Err()
	}
	s.cancel()
	var errs []error
	for _, e := range es {
		e.mu.Lock()
		held := e.h.held
		e.mu.Unlock()
		if held {
			if err := s.auth.Release(ctx, e.key, s.id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// AuthorityKey names a check's lease at the authority: the rule's name,
// its ':' and '%' escaped, then the check's key, so that no two rules'
// keys meet.
func AuthorityKey(rule, key string) string {
	if strings.ContainsAny(rule, ":%") {
		rule = strings.NewReplacer("%", "%25", ":", "%3A").Replace(rule)
	}
	return rule + ":" + key
}
