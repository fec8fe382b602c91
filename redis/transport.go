package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// transport is how a Store's requests reach Redis, chosen once in New
// from the client and the options: direct (a run per request, through
// the client), batched (concurrent requests share a run, on a single
// Redis), or per Cluster node (runs sent to each master directly, see
// nodes.go). The deny cache is a layer over it (see denycache.go).
type transport interface {
	// decide has Redis decide p whole, writing its decisions to out.
	decide(ctx context.Context, p *pending, out []sluice.Decision) error
	// parts is p's parts for a request decided with checks of another
	// store (a Pair's): one when a run can decide p, else one per node
	// (slot, tag). byClient sends a Cluster's through the cluster client,
	// a run per slot, which follows Redis's redirections.
	parts(ctx context.Context, p *pending, byClient bool) ([]*part, error)
	// moved makes the transport find its keys' nodes again, a slot
	// having moved.
	moved(ctx context.Context)
}

// direct sends each request in a run of its own through the Store's
// client: on a Cluster or a Ring, a part per slot (tag) when a request's
// keys have no one in common (see split.go).
type direct struct {
	s *Store
	l *link
}

func (d *direct) decide(ctx context.Context, p *pending, out []sluice.Decision) error {
	if !d.s.keys.oneRun(p.keys) {
		if d.s.keys.noSplit {
			return d.s.keys.crossSlot(p.keys)
		}
		return d.s.split(ctx, d.slotParts(p), out)
	}
	reply, err := d.l.in.send(ctx, whole{}, p)
	if err != nil {
		return err
	}
	p.decode(reply, out)
	return nil
}

func (d *direct) parts(ctx context.Context, p *pending, _ bool) ([]*part, error) {
	if d.s.keys.oneRun(p.keys) {
		return parts(d.s, p, func(int) bool { return true }, func(int) *link { return d.l }), nil
	}
	if d.s.keys.noSplit {
		return nil, d.s.keys.crossSlot(p.keys)
	}
	return d.slotParts(p), nil
}

func (d *direct) moved(context.Context) {}

// slotParts splits p's checks by slot on a Cluster, by hash tag on a
// Ring: the parts one run through the Store's client can decide.
func (d *direct) slotParts(p *pending) []*part {
	to := func(int) *link { return d.l }
	if d.s.keys.share == shareSlot {
		return parts(d.s, p, func(i int) uint16 { return slot(p.keys[i]) }, to)
	}
	return parts(d.s, p, func(i int) string { return tagOf(p.keys[i]) }, to)
}

// batched sends concurrent requests to a single Redis together, in one
// run (see batch.go).
type batched struct{ direct }

func (b *batched) decide(ctx context.Context, p *pending, out []sluice.Decision) error {
	reply, err := b.l.in.send(ctx, whole{}, p)
	if err != nil {
		return err
	}
	p.decode(reply, out)
	return nil
}

// sender sends one request in a run of the given flavour and returns the
// script's reply for it. A link is one; the breaker is a layer over it
// (see guard).
type sender interface {
	send(ctx context.Context, f flavour, p *pending) ([]int64, error)
}

// link is one way that runs go to a Redis: the Store's client, or a
// Cluster master directly (node), whose runs carry their keys in ARGV.
type link struct {
	s      *Store
	client goredis.UniversalClient
	via    via
	ap     *goredis.AutoPipeliner // for viaPipeline
	node   bool
	// batch batches whole requests, parts the parts of requests across
	// masters; nil sends each in a run of its own.
	batch, parts *batcher
	// slots bound the requests in flight towards this Redis (see
	// WithMaxInFlight): a request holds one from before it queues until
	// its caller returns.
	slots chan struct{}
	// answered is when this Redis last had an answer to a run, in Unix ns
	// by the breaker's clock (see loaded).
	answered atomic.Int64
	// in is the link behind the store's breaker: how requests are sent.
	in sender
}

// via is how a script run goes to Redis.
type via uint8

const (
	viaAside    via = iota // in a goroutine, so that the call's deadline holds whatever the client does
	viaDirect              // directly: the client honours a context's deadline itself
	viaPipeline            // through the client's autopipeliner
)

// newLink is a link to client's Redis for s, behind s's breaker.
func newLink(s *Store, client goredis.UniversalClient, v via, node bool) *link {
	l := &link{s: s, client: client, via: v, node: node, slots: make(chan struct{}, s.maxInFlight)}
	l.in = &guard{br: &s.br, rejected: &s.st.rejected, next: l}
	return l
}

// send has Redis decide p, within p's deadlines, once it has a place in
// flight towards its Redis: in the next batch of its flavour on l, or
// alone in a run of its own.
func (l *link) send(ctx context.Context, f flavour, p *pending) ([]int64, error) {
	s := l.s
	s.st.calls.Add(1)
	s.deadlines(ctx, p)
	if err := p.acquire(ctx, l.slots); err != nil {
		return nil, s.failed(ctx, err)
	}
	defer func() { <-l.slots }()
	var b *batcher
	switch f.(type) {
	case whole:
		b = l.batch
	case taking:
		b = l.parts // with the other parts bound for its node
	}
	var reply []int64
	var err error
	if b != nil {
		reply, err = b.take(ctx, p)
	} else {
		reply, err = l.alone(ctx, f, p)
	}
	if err != nil {
		return nil, s.failed(ctx, err)
	}
	return reply, nil
}

// giveBack sends the give-back p, of a take whose receipts g holds, in a
// run of its own. It needs no place in flight: it returns a charge, and
// is never shed.
func (l *link) giveBack(ctx context.Context, g *giving, p *pending) ([]int64, error) {
	l.s.deadlines(ctx, p)
	return l.alone(ctx, g, p)
}

// alone sends p in a run of its own, unless its caller no longer waits.
func (l *link) alone(ctx context.Context, f flavour, p *pending) ([]int64, error) {
	if err := p.gaveUp(ctx); err != nil {
		return nil, err
	}
	if err := l.write(ctx, f, []*pending{p}, nil, true); err != nil {
		return nil, err
	}
	return p.reply, p.err
}

// deadlines sets when p's caller stops waiting for its turn: when the
// store's timeout runs out, or ctx's deadline, whichever is sooner. A call is bounded from when it
// is written by the store's timeout alone (see write).
func (s *Store) deadlines(ctx context.Context, p *pending) {
	if s.timeout > 0 {
		p.expires = time.Now().Add(s.timeout)
		p.deadline = p.expires
	}
	if dl, ok := ctx.Deadline(); ok && (p.deadline.IsZero() || dl.Before(p.deadline)) {
		p.deadline = dl
	}
}

// acquire takes a place for p in slots, waiting for one until p's
// deadline at most: past it, p is shed.
func (p *pending) acquire(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	var expired <-chan time.Time
	if !p.expires.IsZero() {
		// Only a request that finds no room pays for a timer.
		t := time.NewTimer(time.Until(p.expires))
		defer t.Stop()
		expired = t.C
	}
	select {
	case slots <- struct{}{}:
		return nil
	case <-expired:
		return sluice.ErrShed
	case <-ctx.Done():
		return stopped(ctx)
	}
}

// stopped is the error of a request whose caller stopped waiting for its
// turn or its answer: sluice.ErrShed when a deadline ran out, ctx's error
// when it was cancelled.
func stopped(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return sluice.ErrShed
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (%w)", sluice.ErrShed, err)
}

// write sends batch as one script run of flavour f. The run is bounded by
// the store's timeout from now, when it is written: so a run that fails
// to answer in time is told apart from callers that waited long for their
// turn. A run that serves others besides its leader's caller is not ended
// by their deadlines (each stops waiting at its own); one that serves
// that caller alone (own) is, and returns its caller's error when it is:
// nothing was learnt of Redis. Without a timeout of the store's, a run is
// bounded by its callers' latest deadline.
//
// A run that times out is load or failure, as loaded says: the error of
// load wraps sluice.ErrShed.
func (l *link) write(ctx context.Context, f flavour, batch []*pending, buf *runBuf, own bool) error {
	s := l.s
	for _, q := range batch {
		q.wrote.Store(true)
	}
	var rctx context.Context
	var cancel context.CancelFunc
	switch {
	case s.timeout > 0 && own:
		rctx, cancel = context.WithTimeout(ctx, s.timeout)
	case s.timeout > 0:
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	default:
		dl, ok := latest(batch)
		rctx, cancel = runContext(ctx, own, dl, ok)
	}
	err := l.run(rctx, f, batch, buf, false)
	// The client may end a call at its deadline a moment before the
	// context's timer fires: then wait for it, so that the end is put
	// down to the right bound.
	if dl, ok := rctx.Deadline(); ok && err != nil && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(dl) {
		<-rctx.Done()
	}
	ended := rctx.Err() != nil
	if cancel != nil {
		cancel()
	}
	switch {
	case err == nil:
		l.answered.Store(s.br.clock.Now().UnixNano())
		return nil
	case !ended:
		return err
	case (own || s.timeout == 0) && ctx.Err() != nil:
		return stopped(ctx) // its caller gave up
	}
	err = fmt.Errorf("%w (%v)", ErrTimeout, s.timeout)
	if l.loaded() {
		return fmt.Errorf("%w: %w", err, sluice.ErrShed)
	}
	return err
}

// alive is how recent an answer from a Redis must be for a call to it
// that timed out to be taken for load rather than for a Redis gone: a
// second, far more than the store's timeout, so that a process stalled
// for a while under a flood still finds its Redis alive.
const alive = time.Second

// loaded reports whether a run on l that timed out is taken for load:
// its Redis answered another run within the last second. A late answer
// from a Redis that answers others is as likely a process too busy to
// read it in time, under a flood, as a Redis gone: such a run's requests
// are shed, and the breaker does not count it. After a second without
// any answer, a timeout is a failure: it counts, and the failure modes
// decide.
func (l *link) loaded() bool {
	return l.s.br.clock.Now().UnixNano()-l.answered.Load() < int64(alive)
}

// failed is the error of a call that failed with err, counted: a
// request shed, one given up by its caller (its context's error), a
// timeout of the store's (ErrTimeout), or another error of Redis's. A
// request whose slot moved (errMoved) is decided again, not counted.
func (s *Store) failed(ctx context.Context, err error) error {
	switch {
	case err == errMoved:
	case errors.Is(err, ErrTimeout):
		s.st.errors.Add(1)
		s.st.timeouts.Add(1)
	case errors.Is(err, sluice.ErrShed):
		s.st.shed.Add(1)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
	default:
		s.st.errors.Add(1)
	}
	return err
}

// exec runs take.lua with args, which begin with FCALL and the function's
// name, on l (see call), and reads its answer: an array of integers.
func (l *link) exec(ctx context.Context, args []any) ([]int64, error) {
	cmd, err := l.call(ctx, &takeLua, args)
	if err != nil {
		return nil, err
	}
	return cmd.Int64Slice()
}

// call runs sc with args, which begin with FCALL and the function's
// name, on l: by FCALL, and on "Function not found" (a restart, a
// failover, FUNCTION FLUSH, a master new to a Cluster) loads sc's library
// where l's client reaches, then FCALL again; on a server with no
// functions for the store, by EVALSHA, and on NOSCRIPT EVAL, which loads
// the script again. Such an answer means the script did not run, so
// nothing is charged twice.
func (l *link) call(ctx context.Context, sc *script, args []any) (*goredis.Cmd, error) {
	s := l.s
	if !s.noFunctions.Load() {
		cmd, err := l.do(ctx, args)
		if err != nil && goredis.HasErrorPrefix(err, "Function not found") {
			s.st.reloads.Add(1)
			if err = l.loadLibrary(ctx, sc.library); err == nil {
				cmd, err = l.do(ctx, args)
			}
		}
		if err == nil || !noFunctions(err) {
			return cmd, err
		}
		s.noFunctions.Store(true)
	}
	args[0], args[1] = "evalsha", sc.sha
	cmd, err := l.do(ctx, args)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		s.st.reloads.Add(1)
		args[0], args[1] = "eval", sc.src
		cmd, err = l.do(ctx, args)
	}
	return cmd, err
}

// loadLibrary loads a library of the store's functions where l's client
// reaches: every master of a Cluster and every shard of a Ring, as a
// key's run may go to any of them, else its one Redis.
func (l *link) loadLibrary(ctx context.Context, library string) error {
	load := func(ctx context.Context, c *goredis.Client) error {
		return c.Do(ctx, "function", "load", "replace", library).Err()
	}
	switch c := l.client.(type) {
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *goredis.Ring:
		return c.ForEachShard(ctx, load)
	}
	return l.process(ctx, goredis.NewCmd(ctx, "function", "load", "replace", library))
}

// noFunctions reports whether err says that the server has no functions
// for the store: a Redis before 7, or a user whose ACL refuses them.
func noFunctions(err error) bool {
	return goredis.HasErrorPrefix(err, "unknown command") || goredis.HasErrorPrefix(err, "NOPERM")
}

// do sends one command on l and waits for its answer or the end of ctx.
func (l *link) do(ctx context.Context, args []any) (*goredis.Cmd, error) {
	cmd := goredis.NewCmd(ctx, args...)
	return cmd, l.process(ctx, cmd)
}

// process sends cmd on l and waits for its answer or the end of ctx.
func (l *link) process(ctx context.Context, cmd *goredis.Cmd) error {
	switch l.via {
	case viaPipeline:
		return l.ap.Submit(ctx, cmd).WaitContext(ctx)
	case viaDirect:
		err := l.client.Process(ctx, cmd)
		// The client ends the call at ctx's deadline as the connection's,
		// with an i/o timeout: that is the deadline running out, which
		// failed tells apart from other errors as a timeout of the store.
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
			}
		}
		return err
	}
	// The client's own timeouts (ReadTimeout, 3s by default) bound the
	// call, not ctx: wait for it aside. The goroutine ends when the
	// client gives up.
	ch := make(chan error, 1)
	go func() { ch <- l.client.Process(ctx, cmd) }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
