package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

//go:embed take.lua
var takeScript string

var takeSHA = func() string {
	h := sha1.Sum([]byte(takeScript))
	return hex.EncodeToString(h[:])
}()

// The script and its hash as arguments, boxed once.
var takeScriptArg, takeSHAArg any = takeScript, takeSHA

// The script as a library of Redis functions (Redis 7 and later), and its
// function's name, of this version of the script: a run by FCALL spares
// Redis the script's set-up that EVALSHA redoes at every run (see
// take.lua). The library is loaded on first use, as a script is. Its
// function may touch keys of any slot its node holds
// (allow-cross-slot-keys), as a run to a Cluster's master does with the
// keys in ARGV (see nodes.go); elsewhere the flag changes nothing.
//
// The library has a second function, fixedrun's: a run whose every
// request is one unit of a fixed window goes to it (see fixedrun in
// take.lua, and run), by FCALL only; by EVALSHA, take decides that run,
// from the same arguments.
var (
	takeFn          = "sluice_take_" + takeSHA
	fixedFn         = "sluice_fixed_" + takeSHA
	takeLibrary     = "#!lua name=" + takeFn + "\n" + takeScript + "\nredis.register_function{function_name='" + takeFn + "', callback=take, flags={'allow-cross-slot-keys'}}\nredis.register_function{function_name='" + fixedFn + "', callback=fixedrun}\n"
	takeFnArg   any = takeFn
	fixedFnArg  any = fixedFn
)

// Errors a Take can return besides those of Redis and the context.
var (
	// ErrCircuitOpen is returned, at once, while the circuit breaker is
	// open after a sustained rate of failed calls (see WithBreaker).
	ErrCircuitOpen = errors.New("redis: circuit open: recent calls failed")
	// ErrCrossSlot is returned, under WithoutSplit, for a request whose
	// checks hash to more than one Redis Cluster slot: they cannot be
	// decided in one script run, so none is decided. Give them a common
	// hash tag with WithHashTag. It wraps sluice.ErrRefused.
	ErrCrossSlot = fmt.Errorf("redis: checks of one request in different cluster slots: %w", sluice.ErrRefused)
	// ErrTimeout is returned when Redis did not answer within the bound
	// set by WithTimeout, counted from when the call was written (see
	// Deadlines and clocks). It wraps context.DeadlineExceeded; while
	// that Redis answered other calls within the last second, the error
	// returned wraps sluice.ErrShed too, so that a Limiter denies the
	// request, and the breaker does not count it (see Load in the package
	// documentation).
	ErrTimeout = fmt.Errorf("redis: no answer in time: %w", context.DeadlineExceeded)
)

// errUnprepared is the error for a rule that is nil or not prepared: the
// store reads a rule's arithmetic from its prepared form alone.
var errUnprepared = errors.New("redis: the rule is not prepared (sluice.Rule.Prepare)")

// Store is a sluice.Store in Redis. It is safe for concurrent use. It
// keeps no goroutine running: see New for the one a call may wait in.
type Store struct {
	client     goredis.UniversalClient
	via        via                    // how a script run goes to Redis
	ap         *goredis.AutoPipeliner // for viaPipeline
	batch      *batcher               // nil without batching
	keys       keyScheme
	callerTime bool          // decide at the caller's now, not Redis TIME
	timeout    time.Duration // the store's bound on a call; see Deadlines and clocks
	cache      *denyCache    // nil without the deny cache
	nodes      *nodeSet      // on a Cluster with batching: runs per node
	// cacheCap, if not 0, bounds how long a denial is cached, in ns: see
	// capDenials.
	cacheCap atomic.Int64
	br       breaker
	// slots bound the requests in flight towards the store's client (see
	// WithMaxInFlight): a request holds one from before it queues until
	// its caller returns. A Cluster's masters have theirs (node.slots).
	slots chan struct{}
	// answered is when the store's client last had an answer to a run,
	// in Unix ns by the breaker's clock (see loaded); a Cluster's masters
	// have theirs.
	answered atomic.Int64
	slack    time.Duration // added to every TTL: idleSlack, or WithClockSkew's
	maxBatch int           // requests in a script run, at most
	// clock is set when the store keeps its own clock (clockKey): at Redis
	// TIME on a single Redis, where every key of a run may sit with it.
	// A fixed window is then a counter per window (see take.lua).
	clock    bool
	clockKey string
	clockArg any // clockKey, boxed once
	// fcall is set when runs go by FCALL: on a single Redis, and on a
	// Cluster those sent to a master (each master loads the library on
	// its first "Function not found"), not those through the cluster
	// client, nor a Ring's; noFunctions once a server has answered that it
	// has no functions for the store (before Redis 7, or an ACL): runs go
	// by EVALSHA then.
	fcall       bool
	noFunctions atomic.Bool
	st          counters
}

// via is how a script run goes to Redis.
type via uint8

const (
	viaAside    via = iota // in a goroutine, so that the call's deadline holds whatever the client does
	viaDirect              // directly: the client honours a context's deadline itself
	viaPipeline            // through the client's autopipeliner
)

var _ sluice.Store = (*Store)(nil)

// New returns a Store on client: a *goredis.Client, a Sentinel failover
// client, a *goredis.ClusterClient or a *goredis.Ring. It does not contact
// Redis; the script is loaded by the first call that needs it.
//
// The Store does not own client, and reuses the memory of a command's
// arguments once the call is over: a hook added to client must not keep
// them past its call (copy what it keeps). Without batching, it uses the
// client's shared asynchronous autopipeliner (unless
// WithoutAutoPipeline), which the client releases when closed. A client with ContextTimeoutEnabled is
// called directly; otherwise a call waits aside, in a goroutine that ends
// when the client's own timeouts end it, so that WithTimeout holds.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: nil client")
	}
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s := &Store{
		client:     client,
		keys:       keyScheme{prefix: o.prefix, tag: o.tag, window: o.window, noSplit: o.noSplit},
		callerTime: o.callerTime,
		timeout:    o.timeout,
		br:         breaker{minCalls: o.failures, cooldown: o.cooldown, clock: o.clock},
		slots:      make(chan struct{}, o.maxInFlight),
		slack:      max(o.skew, idleSlack),
		maxBatch:   o.maxBatch,
	}
	ctxTimeouts := false
	switch c := client.(type) {
	case *goredis.Client:
		ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		s.keys.share = shareSlot
		ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		s.keys.share = shareTag
		ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	if ctxTimeouts {
		s.via = viaDirect
	}
	// A Cluster's or a Ring's request cannot share a key with every other
	// request; a caller's time is held to the algorithms' per-key rule,
	// that a time before one the key has seen is read as that time.
	if s.keys.share == shareNothing && (!o.callerTime || o.storeClock) {
		s.clock, s.clockKey = true, o.prefix+"clock"
		s.clockArg = s.clockKey
	}
	if o.denyCache > 0 {
		s.cache = newDenyCache(o.denyCache)
	}
	if o.batching && s.keys.share == shareNothing {
		s.batch = &batcher{s: s}
	}
	if cc, ok := client.(*goredis.ClusterClient); ok && o.batching {
		s.nodes = &nodeSet{cc: cc}
	}
	s.fcall = s.keys.share == shareNothing || s.nodes != nil
	if s.keys.share != shareNothing && !o.noSplit {
		s.capDenials()
	}
	if s.batch == nil && o.autoPipeline {
		ap, err := client.AsyncAutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("redis: autopipeline: %w", err)
		}
		s.ap, s.via = ap, viaPipeline
	}
	return s, nil
}

// Load loads the store's script into Redis, and its library of functions
// where the store runs them (Redis 7 and later): on every master of a
// Cluster, every shard of a Ring. Without it the first calls load them,
// each on finding them missing; on a cold start under load many calls
// then wait for a load at once, and may miss their deadline. Call it
// before taking traffic: sluice serve does, before it reports ready.
func (s *Store) Load(ctx context.Context) error {
	if s.nodes != nil {
		if err := s.nodes.load(ctx, s); err != nil {
			return err
		}
	}
	var err error
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return s.load(ctx, c) })
	case *goredis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, c *goredis.Client) error { return s.load(ctx, c) })
	default:
		err = s.load(ctx, s.client)
	}
	if err != nil {
		return fmt.Errorf("redis: loading the script: %w", err)
	}
	s.answered.Store(s.br.clock.Now().UnixNano())
	return nil
}

// load loads the script, and the library where runs go by FCALL, into
// the Redis c reaches.
func (s *Store) load(ctx context.Context, c goredis.UniversalClient) error {
	if s.fcall && !s.noFunctions.Load() {
		err := c.Do(ctx, "function", "load", "replace", takeLibrary).Err()
		switch {
		case err != nil && noFunctions(err):
			s.noFunctions.Store(true)
		case err != nil:
			return err
		}
	}
	return c.ScriptLoad(ctx, takeScript).Err()
}

// Stats counts what a Store did since New.
type Stats struct {
	Calls    int64 // requests sent to Redis
	Runs     int64 // script runs: a run decides a batch of requests
	Errors   int64 // calls that failed, timeouts included
	Timeouts int64 // calls without an answer within the deadline
	Reloads  int64 // answers that Redis had no script or function, after which it was sent again
	Rejected int64 // calls refused at once by the open circuit
	// Shed counts requests whose turn did not come before their deadline
	// (see WithMaxInFlight): not errors, and not told to the breaker.
	Shed      int64
	CacheHits int64 // requests denied from the local denial cache
	// Splits counts requests decided in parts: across Cluster masters
	// (slots WithoutBatching), Ring tags or a Pair's stores (see Requests
	// across slots in the package documentation);
	// GiveBacks, the parts given back because another part denied or
	// failed; GiveBackErrors, the give-backs that failed and so left
	// their part charged.
	Splits         int64
	GiveBacks      int64
	GiveBackErrors int64
	// Moved counts requests a Cluster node could not decide, a slot of
	// their keys having moved, decided again through the cluster client.
	Moved int64
	// Breaker is the circuit breaker's state, BreakerOpens how often it
	// has opened.
	Breaker      string
	BreakerOpens int64
}

type counters struct {
	calls, runs, errors, timeouts, reloads, rejected, hits, shed atomic.Int64
	splits, giveBacks, giveBackErrors, moved                     atomic.Int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls:          s.st.calls.Load(),
		Runs:           s.st.runs.Load(),
		Errors:         s.st.errors.Load(),
		Timeouts:       s.st.timeouts.Load(),
		Reloads:        s.st.reloads.Load(),
		Rejected:       s.st.rejected.Load(),
		Shed:           s.st.shed.Load(),
		CacheHits:      s.st.hits.Load(),
		Splits:         s.st.splits.Load(),
		GiveBacks:      s.st.giveBacks.Load(),
		GiveBackErrors: s.st.giveBackErrors.Load(),
		Moved:          s.st.moved.Load(),
		Breaker:        s.br.state(),
		BreakerOpens:   s.br.opens.Load(),
	}
}

// Counters returns Stats in plain types: each count by its field's name,
// and the breaker's state. A reader can then ask for them through an
// interface of its own, without importing this package, as the service's
// console and metrics do.
func (s *Store) Counters() (counts map[string]int64, breaker string) { return s.Stats().counters() }

func (st Stats) counters() (map[string]int64, string) {
	return map[string]int64{
		"Calls":          st.Calls,
		"Runs":           st.Runs,
		"Errors":         st.Errors,
		"Timeouts":       st.Timeouts,
		"Reloads":        st.Reloads,
		"Rejected":       st.Rejected,
		"Shed":           st.Shed,
		"CacheHits":      st.CacheHits,
		"Splits":         st.Splits,
		"GiveBacks":      st.GiveBacks,
		"GiveBackErrors": st.GiveBackErrors,
		"Moved":          st.Moved,
		"BreakerOpens":   st.BreakerOpens,
	}, st.Breaker
}

// CheckRule reports whether the store can hold r (see sluice.RuleChecker):
// nil, or the error a Take with r would return, which wraps ErrOutOfRange
// (and so sluice.ErrRefused) for a limit outside the exact range, and
// errs for a rule nil or not prepared.
func (s *Store) CheckRule(r *sluice.PreparedRule) error {
	sp := algo.Of(r)
	if sp == nil {
		return errUnprepared
	}
	_, err := paramsOf(sp)
	return err
}

var _ sluice.RuleChecker = (*Store)(nil)

// Take decides a request against checks, all-or-nothing (but for
// usage, recorded whatever the request's fate: see Usage charges in the
// package documentation), in one script run: see sluice.Store. The time
// is Redis TIME unless
// WithCallerTime. Errors are Redis's, ErrTimeout, ErrCircuitOpen,
// ErrCrossSlot, ErrOutOfRange, or the context's; a failed Take charged
// nothing, unless the script ran and its answer was lost (for a request
// in parts, a part's), or a give-back failed (Stats.GiveBackErrors).
//
// It goes in four steps: the request's arguments and keys (request), the
// denial cache (cached), Redis behind the circuit breaker and the
// deadlines (send), and the answer (decode, remember).
func (s *Store) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	if len(out) < len(checks) {
		return fmt.Errorf("redis: %d decisions for %d checks", len(out), len(checks))
	}
	if len(checks) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return stopped(ctx) // its deadline came before its turn: shed
	}
	p, err := s.request(now, checks)
	if err != nil {
		return err
	}
	defer p.release()
	cnow := s.cacheNow(now)
	if s.cached(cnow, p, checks, out) {
		return nil
	}
	if err := s.decide(ctx, p, out); err != nil {
		return err
	}
	s.remember(cnow, p, checks, out)
	return nil
}

// capDenials bounds how long a denial is cached on a store whose requests
// may be split: a denial may then be caused by a charge that is given back
// a moment later, within a take's send and a give-back's two, each bounded
// by the store's timeout (a second without one): five leave room.
func (s *Store) capDenials() {
	t := s.timeout
	if t <= 0 {
		t = time.Second
	}
	s.cacheCap.Store(int64(5 * t))
}

// decide has Redis decide p: in one run, or in parts across slots or
// Cluster nodes (see split.go and nodes.go).
func (s *Store) decide(ctx context.Context, p *pending, out []sluice.Decision) error {
	if s.nodes != nil {
		err := s.nodes.decide(ctx, s, p, out)
		if err != errMoved {
			return err
		}
		// A slot moved: the cluster client reloads its map, and decides p
		// meanwhile, a run per slot, following Redis's redirections.
		s.st.moved.Add(1)
		s.nodes.cc.ReloadState(ctx)
		p.to, p.moved, p.reply = nil, false, nil
	}
	return s.decideByClient(ctx, p, out)
}

// decideByClient has p decided through the Store's client: one run, or
// on a Cluster or a Ring, a part per slot (tag).
func (s *Store) decideByClient(ctx context.Context, p *pending, out []sluice.Decision) error {
	if p.split {
		if s.keys.noSplit {
			return s.keys.crossSlot(p.keys)
		}
		return s.split(ctx, s.slotParts(p), out)
	}
	reply, err := s.send(ctx, p)
	if err != nil {
		return err
	}
	p.decode(reply, out)
	return nil
}

// request makes the script's request for checks at now: each
// check's parameters, cost and keys, and the time. It errs for a check the
// store cannot decide and for keys that one script run cannot decide
// together.
func (s *Store) request(now time.Time, checks []sluice.Check) (*pending, error) {
	// The request, with room for the arguments and keys of a few checks
	// inside it, from the pool: no allocation for the common request.
	p := newPending(redisTime)
	if len(checks) > len(p.argBuf) {
		p.args = make([]checkArgs, 0, len(checks))
	}
	for i := range checks {
		a, err := argsOf(i, &checks[i])
		if err != nil {
			p.release()
			return nil, err
		}
		p.args = append(p.args, a)
	}
	if len(checks) > len(p.keyBuf) {
		p.keys = make([]string, 0, len(checks))
	}
	for i, c := range checks {
		p.keys = append(p.keys, s.keys.key(c, p.args[i].p.codeFor(s.clock)))
	}
	split, err := s.keys.together(p.keys)
	if err != nil {
		p.release()
		return nil, err
	}
	p.split = split
	if s.callerTime {
		us, err := micros(now)
		if err != nil {
			p.release()
			return nil, err
		}
		p.now = float64(us) // exact: within 2^52
	}
	return p, nil
}

// argsOf is check i's arguments, its key aside.
func argsOf(i int, c *sluice.Check) (checkArgs, error) {
	if c.Rule == nil {
		return checkArgs{}, fmt.Errorf("redis: check %d has no rule", i)
	}
	sp := algo.Of(c.Rule)
	if sp == nil {
		return checkArgs{}, fmt.Errorf("redis: check %d: %w", i, errUnprepared)
	}
	pr, err := paramsOf(sp)
	if err != nil {
		return checkArgs{}, err
	}
	return checkArgs{p: pr, cost: c.Units(), shadow: c.Rule.Shadow()}, nil
}

// cacheNow is the denial cache's time for a request at now (see Deadlines
// and clocks in the package documentation): the caller's when it decides,
// truncated to the µs as the script reads it (a denial's RetryAfter counts
// from there), else the breaker's clock, read before sending, so no later
// than Redis's decision.
func (s *Store) cacheNow(now time.Time) time.Time {
	if s.cache == nil || s.callerTime {
		return now.Truncate(time.Microsecond)
	}
	return s.br.clock.Now()
}

// send has Redis decide p, through the circuit breaker and within p's
// deadlines, and returns the script's reply for p.
func (s *Store) send(ctx context.Context, p *pending) ([]int64, error) {
	ok, probe := s.br.allow()
	if !ok {
		s.st.rejected.Add(1)
		return nil, ErrCircuitOpen
	}
	p.probe = probe
	s.st.calls.Add(1)
	s.deadlines(ctx, p)
	reply, err := s.call(ctx, p)
	if err != nil {
		return nil, s.failed(ctx, p, err)
	}
	return reply, nil
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

// call sends p in the next batch, or alone in a run of its own, once it
// has a place in flight towards its Redis. A give-back needs none: it
// returns a charge, and is never shed.
func (s *Store) call(ctx context.Context, p *pending) ([]int64, error) {
	if p.mode != modeGive {
		slots := s.slots
		if p.to != nil {
			slots = p.to.slots
		}
		if err := p.acquire(ctx, slots); err != nil {
			return nil, err
		}
		defer func() { <-slots }()
	}
	switch {
	case p.to != nil && p.mode == modeTake:
		return p.to.parts.take(ctx, p) // with the other parts bound for its node
	case p.mode != 0: // a give-back, or a part through the Store's client: a run of its own
	case p.to != nil:
		return p.to.batch.take(ctx, p)
	case p.to == nil && s.batch != nil:
		return s.batch.take(ctx, p)
	}
	if err := p.gaveUp(ctx); err != nil {
		return nil, err
	}
	if err := s.write(ctx, p.to, []*pending{p}, nil, true); err != nil {
		return nil, err
	}
	return p.reply, p.err
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

// write sends batch as one script run and tells the breaker how it went.
// The run is bounded by the store's timeout from now, when it is written:
// so a run that fails to answer in time is told apart from callers that
// waited long for their turn. A run that serves others besides its
// leader's caller is not ended by their deadlines (each stops waiting at
// its own); one that serves that caller alone (own) is, and tells the
// breaker nothing when it is: its caller gave up, and nothing was learnt
// of Redis. Without a timeout of the store's, a run is bounded by its
// callers' latest deadline.
//
// A run that times out is load or failure, as loaded says.
func (s *Store) write(ctx context.Context, to *node, batch []*pending, buf *runBuf, own bool) error {
	probe := false
	for _, q := range batch {
		q.wrote.Store(true)
		probe = probe || q.probe
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
	err := s.run(rctx, to, batch, buf)
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
		s.answeredBy(to).Store(s.br.clock.Now().UnixNano())
		s.br.done(probe, false, int64(len(batch)))
		return nil
	case !ended:
	case (own || s.timeout == 0) && ctx.Err() != nil:
		s.br.abort(probe) // its caller gave up: nothing learnt of Redis
		return stopped(ctx)
	default:
		err = fmt.Errorf("%w (%v)", ErrTimeout, s.timeout)
	}
	if ended && s.loaded(to) {
		s.br.abort(probe)
		return fmt.Errorf("%w: %w", err, sluice.ErrShed)
	}
	s.br.done(probe, true, int64(len(batch)))
	return err
}

// alive is how recent an answer from a Redis must be for a call to it
// that timed out to be taken for load rather than for a Redis gone: a
// second, far more than the store's timeout, so that a process stalled
// for a while under a flood still finds its Redis alive.
const alive = time.Second

// answeredBy is the time of the last answer from the Redis that to names
// (the store's client for nil).
func (s *Store) answeredBy(to *node) *atomic.Int64 {
	if to != nil {
		return &to.answered
	}
	return &s.answered
}

// loaded reports whether a run to to that timed out is taken for load:
// that Redis answered another run within the last second. A late answer
// from a Redis that answers others is as likely a process too busy to
// read it in time, under a flood, as a Redis gone: such a run's requests
// are shed, and the breaker does not count it. After a second without
// any answer, a timeout is a failure: it counts, and the failure modes
// decide.
func (s *Store) loaded(to *node) bool {
	return s.br.clock.Now().UnixNano()-s.answeredBy(to).Load() < int64(alive)
}

// failed is the error of a call that failed with err, counted: a
// request shed, one given up by its caller (its context's error), a
// timeout of the store's (ErrTimeout), or another error of Redis's. The
// breaker has heard of it from its run (see write); a probe that never
// reached Redis frees its place.
func (s *Store) failed(ctx context.Context, p *pending, err error) error {
	if p.probe && !p.wrote.Load() {
		s.br.abort(true)
	}
	switch {
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

// decode writes the checks' decisions from the script's reply for p: six
// numbers a check.
func (p *pending) decode(reply []int64, out []sluice.Decision) {
	for i := range p.args {
		p.decodeOne(i, reply[6*i:6*i+6], &out[i])
	}
}

// decodeOne writes check i's decision from its six numbers in r.
func (p *pending) decodeOne(i int, r []int64, d *sluice.Decision) {
	*d = sluice.Decision{
		Allowed:    r[0] == 1,
		Limit:      p.args[i].p.quota,
		Remaining:  r[1],
		RetryAfter: duration(r[2], r[3]),
		ResetAfter: duration(r[4], r[5]),
	}
}

// run decides a batch of requests in one script run: FCALL, or EVALSHA
// without functions (see exec). It sets each request's reply. buf, if not
// nil, lends the run's slices, and keeps them for the next run.
//
// Only a client called directly is done with a command when it returns:
// called aside or through the autopipeliner, it may still be writing one
// the store stopped waiting for. So only then does a run lend its slices
// and its requests' keys (see below) to the client rather than copies.
//
// to, if not nil, is the Cluster node to send the run to directly, its
// keys in ARGV (see nodes.go); nil sends it through the Store's client.
func (s *Store) run(ctx context.Context, to *node, batch []*pending, buf *runBuf) error {
	via := s.via
	if to != nil {
		via = to.via
	}
	lend := via == viaDirect && buf != nil
	nkeys, size, nchecks := 0, 0, 0
	for _, p := range batch {
		nkeys += len(p.keys)
		nchecks += len(p.args)
		size += 16 + 32*len(p.args)
	}
	clock := s.clock && to == nil
	if clock {
		nkeys++
	}
	// The rules of the run, each sent once however many requests name it.
	var rbuf [4]runRule
	rules := rbuf[:0]
	// The run goes as one string, the script's ARGV[1]: its head (written
	// last), the shape, and the other requests. The shape: a byte per
	// request, its rule for a request that takes a path of its own in the
	// script (see fastRule), else 0 and the request after the shape. Those
	// requests share one time, so they go only in runs whose requests all
	// have the same: at Redis TIME, every run.
	if !lend {
		buf = new(runBuf)
	}
	run := slices.Grow(buf.run[:0], runHead+len(batch)+size)
	run = run[:runHead+len(batch)]
	common := true
	for _, p := range batch[1:] {
		common = common && p.now == batch[0].now
	}
	anyFast, allFast := false, true
	// The one-byte requests on a window's counter go with their window's
	// key, guessed from guess, the store's clock (WithBreakerClock): the
	// script mends the guess when Redis TIME says otherwise, and is spared
	// a string per request when it does not.
	guess := int64(0)
	if !s.callerTime {
		guess = s.br.clock.Now().UnixMicro()
	} else if common {
		guess = int64(batch[0].now)
	}
	for j, p := range batch {
		p.fast = false
		if common && p.mode == 0 && s.fastRule(p) {
			var ri int
			rules, ri = ruleIndex(rules, p.args[0].p, p.args[0].shadow)
			if ri <= 255 {
				run[runHead+j] = byte(ri)
				p.fast = true
				anyFast = true
				continue
			}
		}
		run[runHead+j] = 0
		allFast = false
		run = appendF64(run, p.now)
		run = appendF64(run, float64(len(p.args)))
		for i, a := range p.args {
			var ri int
			rules, ri = ruleIndex(rules, a.p, a.shadow)
			run = appendF64(run, float64(ri))
			// A cost is a double there as it was when the script read it
			// as a decimal: float64 rounds alike.
			run = appendF64(run, float64(a.cost))
			if p.mode == modeGive {
				run = appendF64(run, float64(p.taken[8*i+6]))
				run = appendF64(run, float64(p.taken[8*i+7]))
			}
		}
	}
	putRunHead(run, runFlags(to != nil, clock, batch[0].mode, anyFast), batch[0].now, guess, len(rules), len(batch))
	args := slices.Grow(buf.args[:0], 3+nkeys+1+len(rules))
	fn := takeFnArg
	if allFast && clock && allWindowed(rules, s.clock) {
		fn = fixedFnArg // see fixedrun in take.lua
	}
	args = append(args, "fcall", fn, nkeys)
	if to != nil {
		args[2] = 0 // the keys go last, in ARGV
	}
	if clock {
		args = append(args, s.clockArg)
	}
	tail := len(args) // where the keys begin
	// The keys of one-byte requests on a window's counter, their window's
	// start appended, are made in kb, sized first so that it never moves,
	// and go as strings over its bytes (wkeys, for their addresses): no
	// allocation per request.
	need, nw := 0, 0
	for _, p := range batch {
		if p.fast && p.args[0].p.windowed(s.clock) {
			need += len(p.keys[0]) + 20
			nw++
		}
	}
	kb := slices.Grow(buf.kb[:0], need)
	wkeys := slices.Grow(buf.wkeys[:0], nw)
	for _, p := range batch {
		if p.fast && p.args[0].p.windowed(s.clock) {
			from := len(kb)
			kb = p.args[0].p.appendWindowStart(append(kb, p.keys[0]...), guess)
			wkeys = append(wkeys, unsafe.String(&kb[from], len(kb)-from))
			if lend {
				args = append(args, &wkeys[len(wkeys)-1])
			} else {
				args = append(args, wkeys[len(wkeys)-1])
			}
			continue
		}
		// A key lent goes by its address, which boxes without
		// allocating: the request outlives the call.
		for i := range p.keys {
			if lend {
				args = append(args, &p.keys[i])
			} else {
				args = append(args, p.keys[i])
			}
		}
	}
	args = append(args, run)
	for _, r := range rules {
		args = append(args, s.record(r))
	}
	if to != nil {
		// the keys after the rules: rotate them from tail to the end
		keys := len(args) - tail - 1 - len(rules)
		slices.Reverse(args[tail : tail+keys])
		slices.Reverse(args[tail+keys:])
		slices.Reverse(args[tail:])
	}
	if lend {
		// The slices go back for the next run once the call is over: the
		// client keeps nothing of a command after it returns.
		defer func() {
			clear(args)
			clear(wkeys)
			buf.args, buf.run = args[:0], run[:0]
			buf.kb, buf.wkeys = kb[:0], wkeys[:0]
		}()
	}
	s.st.runs.Add(1)
	reply, err := s.exec(ctx, to, args)
	if err != nil {
		return fmt.Errorf("redis: take: %w", err)
	}
	if len(reply) == 0 {
		return errors.New("redis: script answered nothing")
	}
	at := reply[0] // the time of the one-byte requests
	reply = reply[1:]
	// Check the length first: a reply short for any request is an error
	// for all, and none is answered.
	want := 0
	for _, p := range batch {
		if p.fast {
			want++
		} else {
			want += p.stride() * len(p.args)
		}
	}
	if len(reply) != want {
		return fmt.Errorf("redis: script answered %d values, want %d", len(reply), want)
	}
	var again []*pending
	for _, p := range batch {
		// -2 first: a run on a node (to) found a key of p no longer there
		p.moved = reply[0] == -2
		if p.fast {
			switch {
			case reply[0] == -3: // see cstretch and lstretch: decided again, below
				p.slow = true
				again = append(again, p)
			case !p.moved:
				p.reply = p.args[0].p.expand(p.fastReply[:0], reply[0], at)
			}
			reply = reply[1:]
			continue
		}
		m := p.stride() * len(p.args)
		p.reply = reply[:m:m]
		reply = reply[m:]
	}
	// The requests of a run were in flight together: deciding these after
	// the others breaks no order a caller could see. An error is theirs
	// alone: the others were decided.
	if again != nil {
		if err := s.run(ctx, to, again, nil); err != nil {
			for _, p := range again {
				p.err = err
			}
		}
	}
	return nil
}

// fastRule reports whether p goes on its kind's path of its own in the
// script, answered with one number (see expand): one check of cost 1, of a
// bucket that holds a unit, of a fixed window as a counter per window that
// does, or of a sliding counter or a sliding log that does, under the
// store's clock (which keeps a state from being ahead of the run's time,
// but for a lost clock: see cstretch and lstretch in take.lua). A rule
// charged by usage takes the general path, which records what does not
// fit: those paths charge only what does.
func (s *Store) fastRule(p *pending) bool {
	if len(p.args) != 1 || p.args[0].cost != 1 {
		return false
	}
	pr := p.args[0].p
	switch {
	case pr.charge != algo.ChargeGate:
		return false
	case pr.kind == kindBucket:
		return pr.a[5] >= 1
	case pr.windowed(s.clock):
		return pr.a[0] >= 1
	case pr.kind == kindCounter && s.clock && !p.slow:
		// its answer packs both counts in one number, below 2^53
		return pr.a[0] >= 1 && pr.a[0] < maxFastCounter
	case pr.kind == kindLog && s.clock && !p.slow:
		// a denial's answer packs two waits of at most the Period
		return pr.a[0] >= 1 && pr.a[1] < maxFastLogPeriod
	}
	return false
}

// maxFastCounter bounds the Rate of a sliding counter on the script's path
// of its own: (prev·(Rate+1) + curr)·2 + 1 stays below 2^53 (see cstretch).
const maxFastCounter = 1 << 25

// maxFastLogPeriod bounds the Period, in µs, of a sliding log on the
// script's path of its own: a denial's two waits, each at most the
// Period, pack in one number below 2^53 (see lstretch).
const maxFastLogPeriod = 1 << 26

// allWindowed reports whether every rule is a fixed window's counter per
// window (see params.windowed).
func allWindowed(rules []runRule, clock bool) bool {
	for _, r := range rules {
		if !r.p.windowed(clock) {
			return false
		}
	}
	return true
}

// runRule is a rule as sent in one run: its params, shadow or not.
type runRule struct {
	p      *params
	shadow bool
}

// ruleIndex is the script's index (from 1) of rule (p, shadow) in rules,
// which it is added to if new. A run names few rules: a scan is enough.
func ruleIndex(rules []runRule, p *params, shadow bool) ([]runRule, int) {
	for i, r := range rules {
		if r.p == p && r.shadow == shadow {
			return rules, i + 1
		}
	}
	rules = append(rules, runRule{p, shadow})
	return rules, len(rules)
}

// record is r as the script reads it: made once per rule (and slack).
func (s *Store) record(r runRule) any {
	w, sh := 0, 0
	if r.p.windowed(s.clock) {
		w = 1
	}
	if r.shadow {
		sh = 1
	}
	return r.p.records(s.slack)[w][sh]
}

// redisTime as a request's now has the script read Redis TIME: 2^53 µs,
// outside the range micros allows.
const redisTime = 1 << 53

// runHead is the length of the head of take.lua's ARGV[1]: four bytes of
// flags (see runFlags), the time of the one-byte requests and the guess
// of their windows as doubles, then the number of rules and of requests
// as uint32s, all little-endian, as struct.unpack('<BBBBddI4I4') reads
// them.
const runHead = 4 + 8 + 8 + 4 + 4

// runFlags is the head's four bytes for a run to a Cluster node or not,
// with the store's clock or not, of requests in mode m (0, modeTake,
// modeGive), with one-byte requests or not.
func runFlags(node, clock bool, m byte, fast bool) [4]byte {
	b := func(v bool) byte {
		if v {
			return 1
		}
		return 0
	}
	return [4]byte{b(node), b(clock), m, b(fast)}
}

// putRunHead writes the head into run[:runHead].
func putRunHead(run []byte, flags [4]byte, now float64, guess int64, rules, reqs int) {
	copy(run, flags[:])
	binary.LittleEndian.PutUint64(run[4:], math.Float64bits(now))
	binary.LittleEndian.PutUint64(run[12:], math.Float64bits(float64(guess)))
	binary.LittleEndian.PutUint32(run[20:], uint32(rules))
	binary.LittleEndian.PutUint32(run[24:], uint32(reqs))
}

// runBuf holds a run's slices for the next run by the same leader.
type runBuf struct {
	args  []any
	run   []byte
	kb    []byte   // the bytes of wkeys
	wkeys []string // windowed keys, see run
}

// exec runs the script with args, which begin with FCALL and the
// function's name, to node to or through the Store's client: by FCALL,
// and on "Function not found" (a restart, a failover, FUNCTION FLUSH)
// FUNCTION LOAD, then FCALL again; or, through a Cluster's or a Ring's
// client, or on a server with no functions for the store, by EVALSHA, and
// on NOSCRIPT EVAL, which
// loads the script again. Such an answer means the script did not run, so
// nothing is charged twice.
func (s *Store) exec(ctx context.Context, to *node, args []any) ([]int64, error) {
	if s.fcall && (to != nil || s.keys.share == shareNothing) && !s.noFunctions.Load() {
		reply, err := s.do(ctx, to, args)
		if err != nil && goredis.HasErrorPrefix(err, "Function not found") {
			s.st.reloads.Add(1)
			err = s.process(ctx, to, goredis.NewCmd(ctx, "function", "load", "replace", takeLibrary))
			if err == nil {
				reply, err = s.do(ctx, to, args)
			}
		}
		if err == nil || !noFunctions(err) {
			return reply, err
		}
		s.noFunctions.Store(true)
	}
	args[0], args[1] = "evalsha", takeSHAArg
	reply, err := s.do(ctx, to, args)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		s.st.reloads.Add(1)
		args[0], args[1] = "eval", takeScriptArg
		reply, err = s.do(ctx, to, args)
	}
	return reply, err
}

// noFunctions reports whether err says that the server has no functions
// for the store: a Redis before 7, or a user whose ACL refuses them.
func noFunctions(err error) bool {
	return goredis.HasErrorPrefix(err, "unknown command") || goredis.HasErrorPrefix(err, "NOPERM")
}

// do sends one command, to node to or through the Store's client, and
// waits for its answer, an array of integers, or the end of ctx.
func (s *Store) do(ctx context.Context, to *node, args []any) ([]int64, error) {
	cmd := goredis.NewCmd(ctx, args...)
	if err := s.process(ctx, to, cmd); err != nil {
		return nil, err
	}
	return cmd.Int64Slice()
}

// process sends cmd, to node to or through the Store's client, and waits
// for its answer or the end of ctx.
func (s *Store) process(ctx context.Context, to *node, cmd *goredis.Cmd) error {
	var err error
	client, via := s.client, s.via
	if to != nil {
		client, via = to.client, to.via
	}
	switch via {
	case viaPipeline:
		err = s.ap.Submit(ctx, cmd).WaitContext(ctx)
	case viaDirect:
		err = client.Process(ctx, cmd)
		// The client ends the call at ctx's deadline as the connection's,
		// with an i/o timeout: that is the deadline running out, which
		// failed tells apart from other errors as a timeout of the store.
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
			}
		}
	default:
		// The client's own timeouts (ReadTimeout, 3s by default) bound
		// the call, not ctx: wait for it aside. The goroutine ends when
		// the client gives up.
		ch := make(chan error, 1)
		go func() { ch <- client.Process(ctx, cmd) }()
		select {
		case err = <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
