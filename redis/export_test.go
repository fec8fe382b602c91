package redis

import (
	"context"
	"errors"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// WithStoreClock decides at the caller's time, as WithCallerTime, but
// under the store's clock, as at Redis TIME: no decision at a time before
// the latest the store has seen, and a fixed window as a counter per
// window. Tests use it to hold that path to the algorithms at times they
// choose.
func WithStoreClock() Option {
	return func(o *options) error { o.callerTime, o.storeClock = true, true; return nil }
}

// CacheLen is the number of denials cached.
func (s *Store) CacheLen() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.c.len()
}

// HoldLeaders takes every leader slot of s's batcher, so that Takes queue
// until a test leads them; release gives the slots back.
func HoldLeaders(s *Store) (release func()) { return s.main.batch.hold() }

// HoldRun puts in s's batcher a run out since age ago that comes back
// only at release, as a run on a connection that stopped answering;
// release ends it as a run ends, handing the queue on.
func HoldRun(s *Store, age time.Duration) (release func()) {
	b := s.main.batch
	r := &run{start: time.Now().Add(-age)}
	b.mu.Lock()
	b.running++
	b.runs = append(b.runs, r)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.runs = slices.DeleteFunc(b.runs, func(o *run) bool { return o == r })
		b.endLocked()
	}
}

// Running is the number of leader slots in use in s's batcher.
func Running(s *Store) int {
	s.main.batch.mu.Lock()
	defer s.main.batch.mu.Unlock()
	return s.main.batch.running
}

// Queued is the number of requests waiting in s's batcher.
func Queued(s *Store) int { return s.main.batch.queued() }

// LeadAs makes a caller with ctx, and no request of its own to speak of,
// lead the queued requests, as a waiter handed the queue does.
func LeadAs(ctx context.Context, s *Store) error { return s.main.batch.leadAs(ctx) }

// Batcher is the batcher of the Cluster node that s sends key's
// requests to: HoldLeaders and Queued for that node.
type Batcher struct{ b *batcher }

// NodeBatcher is key's node's batcher.
func NodeBatcher(ctx context.Context, s *Store, key string) (Batcher, error) {
	n, err := s.cluster.of(ctx, key)
	if err != nil {
		return Batcher{}, err
	}
	return Batcher{n.batch}, nil
}

func (b Batcher) HoldLeaders() (release func()) { return b.b.hold() }
func (b Batcher) Queued() int                   { return b.b.queued() }
func (b Batcher) Addr() string                  { return b.b.l.client.(*goredis.Client).Options().Addr }

func (b *batcher) hold() (release func()) {
	b.mu.Lock()
	held := leaders - b.running
	b.running = leaders
	b.mu.Unlock()
	return func() {
		for range held {
			b.mu.Lock()
			b.endLocked()
		}
	}
}

func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) - b.head
}

func (b *batcher) leadAs(ctx context.Context) error {
	p := &pending{}
	p.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	b.running++ // the slot lead gives back or hands on, as take takes it
	b.mu.Unlock()
	_, err := b.lead(ctx, p)
	return err
}

// TakeThenGiveBack takes checks at t1 as one part of a request split
// across slots (with receipts), writing the take's decisions to taken,
// and, if it charged, gives it back at t2, writing the peeks the
// give-back reports to back; between, if not nil, is called in between.
// The give-back is sent sends times, as a client's retries would. s must
// decide at the caller's time and not batch.
func TakeThenGiveBack(ctx context.Context, s *Store, t1, t2 time.Time, checks []sluice.Check, between func(), sends int, taken, back []sluice.Decision) (charged bool, err error) {
	if !s.callerTime || s.main.batch != nil {
		return false, errors.New("TakeThenGiveBack: the store must have WithCallerTime and WithoutBatching")
	}
	p, err := s.request(t1, checks)
	if err != nil {
		return false, err
	}
	defer p.release()
	reply, err := s.main.in.send(ctx, taking{}, p)
	if err != nil {
		return false, err
	}
	pt := &part{s: s, l: s.main, p: p, idx: make([]int, len(checks)), reply: reply}
	for i := range pt.idx {
		pt.idx[i] = i
	}
	pt.decode(reply, 8, taken)
	if !pt.passed() || !pt.charged() {
		return false, nil
	}
	if between != nil {
		between()
	}
	g, give := pt.giveBack(), &giving{taken: pt.reply}
	defer g.release()
	g.now = float64(t2.UnixMicro())
	for range sends {
		if reply, err = s.main.giveBack(ctx, give, g); err != nil {
			return true, err
		}
	}
	g.decode(reply, back)
	return true, nil
}

// Slot is key's Redis Cluster hash slot.
func Slot(key string) uint16 { return slot(key) }
