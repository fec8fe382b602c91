package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// Runs per Cluster node. A script run's KEYS must share a slot, but a
// script may touch keys of any slot its node holds. So on a Cluster the
// Store sends each run to a master directly, with its keys in ARGV (the
// node flag in take.lua): the checks of a request whose keys sit on one node
// are decided in one run, all-or-nothing, whatever their slots, and the
// requests bound for one node are batched together, as on a single Redis.
// Only a request across nodes is decided in parts (see split.go).
//
// The node of a key is the cluster client's map of slots. A run that
// finds a key the node no longer holds (a slot moved, in a resharding or
// a failover) fails that request alone, before it wrote anything: the
// Store has the cluster client reload its map and decides the request
// again through it, a run per slot, which follows Redis's redirections.

// node is a Cluster master a Store sends runs to.
type node struct {
	client *goredis.Client
	via    via
	batch  *batcher      // whole requests
	parts  *batcher      // parts of requests across masters (flavour 1)
	slots  chan struct{} // its requests in flight (see WithMaxInFlight)
	// answered is when it last answered a run (see Store.answered).
	answered atomic.Int64
}

// nodeSet is the masters a Store has sent runs to, by the cluster
// client's client for each: as many as the cluster has had masters.
type nodeSet struct {
	cc *goredis.ClusterClient
	m  sync.Map // *goredis.Client → *node
	// ready is set once cc has its map of slots: of never waits for it
	// after that (a stale map is reloaded in the background). Until then
	// load waits for it, bounded as a call is; loading is the wait of the
	// load under way, nil for none.
	ready   atomic.Bool
	mu      sync.Mutex
	loading chan struct{}
	loadErr error
}

// load waits for the cluster client's map of slots, which it loads on its
// first need: without a bound of the store's, a request would wait for
// it as long as go-redis's own timeouts, and the breaker would never hear
// of it. One load is under way at a time; each caller waits for it
// within its own deadlines, through the breaker, as for a call.
func (ns *nodeSet) load(ctx context.Context, s *Store) error {
	if ns.ready.Load() {
		return nil
	}
	ok, probe := s.br.allow()
	if !ok {
		s.st.rejected.Add(1)
		return ErrCircuitOpen
	}
	ns.mu.Lock()
	if ns.loading == nil {
		done := make(chan struct{})
		ns.loading = done
		go func() {
			_, err := ns.cc.MasterForKey(context.Background(), "sluice")
			ns.mu.Lock()
			ns.loadErr = err
			if err == nil {
				ns.ready.Store(true)
			} else {
				ns.loading = nil // the next caller tries again
			}
			ns.mu.Unlock()
			close(done)
		}()
	}
	done := ns.loading
	ns.mu.Unlock()
	p := &pending{}
	s.deadlines(ctx, p)
	var timeout <-chan time.Time
	if !p.deadline.IsZero() {
		t := time.NewTimer(time.Until(p.deadline))
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-done:
		ns.mu.Lock()
		if !ns.ready.Load() {
			err = fmt.Errorf("redis: the cluster's slots: %w", ns.loadErr)
		}
		ns.mu.Unlock()
	case <-timeout:
		err = context.DeadlineExceeded
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case err == nil:
		s.br.done(probe, false, 1)
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		s.br.abort(probe) // its caller gave up
		return err
	case errors.Is(err, context.DeadlineExceeded):
		err = ErrTimeout
	}
	s.br.done(probe, true, 1)
	p.probe = false // told
	return s.failed(ctx, p, err)
}

// of is the node that holds key.
func (ns *nodeSet) of(ctx context.Context, s *Store, key string) (*node, error) {
	c, err := ns.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("redis: the node of %q: %w", key, err)
	}
	if n, ok := ns.m.Load(c); ok {
		return n.(*node), nil
	}
	n := &node{client: c, via: viaAside}
	if ns.cc.Options().ContextTimeoutEnabled {
		n.via = viaDirect
	}
	n.slots = make(chan struct{}, cap(s.slots))
	n.batch = &batcher{s: s, to: n}
	n.parts = &batcher{s: s, to: n}
	got, _ := ns.m.LoadOrStore(c, n)
	return got.(*node), nil
}

// route finds the nodes of p's checks, once the map of slots is loaded:
// first, its first check's, and to, each check's, nil when they are all
// first's (the common request, which then costs no slice).
func (ns *nodeSet) route(ctx context.Context, s *Store, p *pending) (first *node, to []*node, err error) {
	if err := ns.load(ctx, s); err != nil {
		return nil, nil, err
	}
	if first, err = ns.of(ctx, s, p.keys[0]); err != nil {
		return nil, nil, err
	}
	for i := 1; i < len(p.args); i++ {
		n, err := ns.of(ctx, s, p.keys[i])
		if err != nil {
			return nil, nil, err
		}
		if n != first && to == nil {
			to = make([]*node, len(p.args))
			for j := range i {
				to[j] = first
			}
		}
		if to != nil {
			to[i] = n
		}
	}
	return first, to, nil
}

// decide has p decided on the nodes of its keys: in one run if they sit
// on one, else a part per node. It returns errMoved when a node no longer
// held a key of p, and p was not decided.
func (ns *nodeSet) decide(ctx context.Context, s *Store, p *pending, out []sluice.Decision) error {
	first, to, err := ns.route(ctx, s, p)
	if err != nil {
		return err
	}
	if to == nil {
		p.to = first
		reply, err := s.send(ctx, p)
		if err != nil {
			ns.failed(ctx, err)
			return err
		}
		if p.moved {
			return errMoved
		}
		p.decode(reply, out)
		return nil
	}
	if s.keys.noSplit {
		return s.keys.crossSlot(p.keys)
	}
	err = s.split(ctx, parts(s, p, func(i int) *node { return to[i] }, to), out)
	if err != nil && err != errMoved {
		ns.failed(ctx, err)
	}
	return err
}

// failed has the cluster client reload its map of slots after a run on a
// node failed for a reason of Redis's: the node may be gone, its slots
// served by a replica promoted in its place. (The cluster client reloads
// a map older than its reload interval anyway, and reloads at most once
// per 200ms however many ask.)
func (ns *nodeSet) failed(ctx context.Context, err error) {
	if ctx.Err() == nil && !errors.Is(err, ErrCircuitOpen) && !errors.Is(err, sluice.ErrRefused) {
		ns.cc.ReloadState(ctx)
	}
}
