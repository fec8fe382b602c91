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

// cluster is the transport of a Cluster with batching: each request
// goes to the master of its keys directly, batched with the others bound
// there, on a link of that master's (node); through the cluster client
// (client) once a slot has moved.
type cluster struct {
	s      *Store
	cc     *goredis.ClusterClient
	client *direct
	m      sync.Map // *goredis.Client → *link
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
func (c *cluster) load(ctx context.Context) error {
	if c.ready.Load() {
		return nil
	}
	s := c.s
	ok, probe := s.br.allow()
	if !ok {
		s.st.rejected.Add(1)
		return ErrCircuitOpen
	}
	err := c.wait(ctx, c.start())
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
	return s.failed(ctx, err)
}

// start starts loading the map of slots, unless a load is under way, and
// returns the channel closed when it ends.
func (c *cluster) start() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loading == nil {
		done := make(chan struct{})
		c.loading = done
		go func() {
			_, err := c.cc.MasterForKey(context.Background(), "sluice")
			c.mu.Lock()
			c.loadErr = err
			if err == nil {
				c.ready.Store(true)
			} else {
				c.loading = nil // the next caller tries again
			}
			c.mu.Unlock()
			close(done)
		}()
	}
	return c.loading
}

// wait waits for the load that closes done, within ctx and the store's
// timeout.
func (c *cluster) wait(ctx context.Context, done <-chan struct{}) error {
	p := &pending{}
	c.s.deadlines(ctx, p)
	var timeout <-chan time.Time
	if !p.deadline.IsZero() {
		t := time.NewTimer(time.Until(p.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.ready.Load() {
			return fmt.Errorf("redis: the cluster's slots: %w", c.loadErr)
		}
		return nil
	case <-timeout:
		return context.DeadlineExceeded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// of is the link to the master that holds key.
func (c *cluster) of(ctx context.Context, key string) (*link, error) {
	m, err := c.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("redis: the node of %q: %w", key, err)
	}
	if n, ok := c.m.Load(m); ok {
		return n.(*link), nil
	}
	n := newLink(c.s, m, viaOf(c.cc.Options().ContextTimeoutEnabled), true)
	n.batch = &batcher{l: n, f: whole{}}
	n.parts = &batcher{l: n, f: taking{}}
	got, _ := c.m.LoadOrStore(m, n)
	return got.(*link), nil
}

// route finds the nodes of p's checks, once the map of slots is loaded:
// first, its first check's, and to, each check's, nil when they are all
// first's (the common request, which then costs no slice).
func (c *cluster) route(ctx context.Context, p *pending) (first *link, to []*link, err error) {
	if err := c.load(ctx); err != nil {
		return nil, nil, err
	}
	if first, err = c.of(ctx, p.keys[0]); err != nil {
		return nil, nil, err
	}
	for i := 1; i < len(p.args); i++ {
		n, err := c.of(ctx, p.keys[i])
		if err != nil {
			return nil, nil, err
		}
		if n != first && to == nil {
			to = make([]*link, len(p.args))
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
// on one, else a part per node. When a node no longer held a key of p, p
// is decided again through the cluster client, a run per slot, which
// follows Redis's redirections, while the client reloads its map.
func (c *cluster) decide(ctx context.Context, p *pending, out []sluice.Decision) error {
	err := c.onNodes(ctx, p, out)
	if err != errMoved {
		return err
	}
	c.moved(ctx)
	p.again()
	return c.client.decide(ctx, p, out)
}

// onNodes has p decided on the nodes of its keys. It returns errMoved
// when a node no longer held a key of p, and p was not decided.
func (c *cluster) onNodes(ctx context.Context, p *pending, out []sluice.Decision) error {
	first, to, err := c.route(ctx, p)
	if err != nil {
		return err
	}
	if to == nil {
		reply, err := first.in.send(ctx, whole{}, p)
		if err != nil {
			if err != errMoved {
				c.failed(ctx, err)
			}
			return err
		}
		p.decode(reply, out)
		return nil
	}
	if c.s.keys.noSplit {
		return c.s.keys.crossSlot(p.keys)
	}
	err = c.s.split(ctx, parts(c.s, p, func(i int) *link { return to[i] }, func(i int) *link { return to[i] }), out)
	if err != nil && err != errMoved {
		c.failed(ctx, err)
	}
	return err
}

func (c *cluster) parts(ctx context.Context, p *pending, byClient bool) ([]*part, error) {
	if byClient {
		return c.client.parts(ctx, p, true)
	}
	first, to, err := c.route(ctx, p)
	switch {
	case err != nil:
		return nil, err
	case to == nil:
		return parts(c.s, p, func(int) bool { return true }, func(int) *link { return first }), nil
	case c.s.keys.noSplit:
		return nil, c.s.keys.crossSlot(p.keys)
	}
	return parts(c.s, p, func(i int) *link { return to[i] }, func(i int) *link { return to[i] }), nil
}

// moved counts a request whose slot moved and has the cluster client
// reload its map.
func (c *cluster) moved(ctx context.Context) {
	c.s.st.moved.Add(1)
	c.cc.ReloadState(ctx)
}

// failed has the cluster client reload its map of slots after a run on a
// node failed for a reason of Redis's: the node may be gone, its slots
// served by a replica promoted in its place. (The cluster client reloads
// a map older than its reload interval anyway, and reloads at most once
// per 200ms however many ask.)
func (c *cluster) failed(ctx context.Context, err error) {
	if ctx.Err() == nil && !errors.Is(err, ErrCircuitOpen) && !errors.Is(err, sluice.ErrRefused) {
		c.cc.ReloadState(ctx)
	}
}
