package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

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
	takeLua         = script{library: takeLibrary, src: takeScriptArg, sha: takeSHAArg}
)

// script is a Lua file the store runs: the library FUNCTION LOAD loads
// for FCALL, and the source and its hash for EVAL and EVALSHA, boxed once.
type script struct {
	library  string
	src, sha any
}

// scripts are the files Load loads.
var scripts = []*script{&takeLua, &leaseLua}

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
	client goredis.UniversalClient
	// t is how requests reach Redis, chosen in New: the deny cache (if
	// any) over the transport.
	t       transport
	cache   *cacheLayer // nil without the deny cache
	main    *link       // the store's client
	cluster *cluster    // on a Cluster with batching: runs per node
	keys    keyScheme
	// callerTime decides at the caller's now, not Redis TIME.
	callerTime  bool
	timeout     time.Duration // the store's bound on a call; see Deadlines and clocks
	br          breaker
	maxInFlight int           // a link's requests in flight, at most
	slack       time.Duration // added to every TTL: idleSlack, or WithClockSkew's
	maxBatch    int           // requests in a script run, at most
	// clock is set when the store keeps its own clock (clockKey): at Redis
	// TIME on a single Redis, where every key of a run may sit with it.
	// A fixed window is then a counter per window (see take.lua).
	clock    bool
	clockKey string
	clockArg any // clockKey, boxed once
	// noFunctions is set once a server has answered that it has no
	// functions for the store (before Redis 7, or an ACL): runs go by
	// EVALSHA then, and by FCALL until then, where the script's helpers
	// are made once per load rather than at every run.
	noFunctions atomic.Bool
	st          counters
}

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
		client:      client,
		keys:        keyScheme{prefix: o.prefix, tag: o.tag, window: o.window, noSplit: o.noSplit},
		callerTime:  o.callerTime,
		timeout:     o.timeout,
		br:          breaker{minCalls: o.failures, cooldown: o.cooldown, clock: o.clock},
		maxInFlight: o.maxInFlight,
		slack:       max(o.skew, idleSlack),
		maxBatch:    o.maxBatch,
	}
	v, cc := viaAside, (*goredis.ClusterClient)(nil)
	switch c := client.(type) {
	case *goredis.Client:
		v = viaOf(c.Options().ContextTimeoutEnabled)
	case *goredis.ClusterClient:
		s.keys.share, cc = shareSlot, c
		v = viaOf(c.Options().ContextTimeoutEnabled)
	case *goredis.Ring:
		s.keys.share = shareTag
		v = viaOf(c.Options().ContextTimeoutEnabled)
	}
	// A Cluster's or a Ring's request cannot share a key with every other
	// request; a caller's time is held to the algorithms' per-key rule,
	// that a time before one the key has seen is read as that time.
	if s.keys.share == shareNothing && (!o.callerTime || o.storeClock) {
		s.clock, s.clockKey = true, o.prefix+"clock"
		s.clockArg = s.clockKey
	}
	s.main = newLink(s, client, v, false)
	if err := s.choose(o, cc); err != nil {
		return nil, err
	}
	if s.keys.share != shareNothing && !o.noSplit {
		s.capDenials()
	}
	return s, nil
}

// viaOf is how runs go on a client that honours a context's deadline
// itself (ContextTimeoutEnabled) or not.
func viaOf(ctxTimeouts bool) via {
	if ctxTimeouts {
		return viaDirect
	}
	return viaAside
}

// choose chooses how s's requests reach Redis: on a Cluster with
// batching, runs per node; on a single Redis with batching, batched;
// else a run per request, through the client's autopipeliner unless
// WithoutAutoPipeline. The deny cache goes over it.
func (s *Store) choose(o options, cc *goredis.ClusterClient) error {
	d := direct{s: s, l: s.main}
	switch {
	case cc != nil && o.batching:
		s.cluster = &cluster{s: s, cc: cc, client: &d}
		s.t = s.cluster
	case o.batching && s.keys.share == shareNothing:
		s.main.batch = &batcher{l: s.main, f: whole{}}
		s.t = &batched{d}
	default:
		s.t = &d
	}
	// go-redis has no autopipeliner for a Ring: its runs go direct.
	if _, ring := s.client.(*goredis.Ring); s.main.batch == nil && o.autoPipeline && !ring {
		ap, err := s.client.AsyncAutoPipeline()
		if err != nil {
			return fmt.Errorf("redis: autopipeline: %w", err)
		}
		s.main.ap, s.main.via = ap, viaPipeline
	}
	if o.denyCache > 0 {
		s.cache = &cacheLayer{transport: s.t, c: newDenyCache(o.denyCache), hits: &s.st.hits, clock: o.clock, callerTime: o.callerTime}
		s.t = s.cache
	}
	return nil
}

// Load loads the store's scripts (take.lua, and lease.lua for Authority)
// into Redis, and their libraries of functions where the store runs them
// (Redis 7 and later): on every master of a Cluster, every shard of a
// Ring. Without it the first calls load them,
// each on finding them missing; on a cold start under load many calls
// then wait for a load at once, and may miss their deadline. Call it
// before taking traffic: sluice serve does, before it reports ready.
func (s *Store) Load(ctx context.Context) error {
	if s.cluster != nil {
		if err := s.cluster.load(ctx); err != nil {
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
	s.main.answered.Store(s.br.clock.Now().UnixNano())
	return nil
}

// load loads the scripts, and their libraries where runs go by FCALL,
// into the Redis c reaches.
func (s *Store) load(ctx context.Context, c goredis.UniversalClient) error {
	for _, sc := range scripts {
		if !s.noFunctions.Load() {
			err := c.Do(ctx, "function", "load", "replace", sc.library).Err()
			switch {
			case err != nil && noFunctions(err):
				s.noFunctions.Store(true)
			case err != nil:
				return err
			}
		}
		if err := c.Do(ctx, "script", "load", sc.src).Err(); err != nil {
			return err
		}
	}
	return nil
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
	// across slots in docs/redis.md);
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

// Resolution is the quantum of time the store decides r at: a caller's
// time is read in whole quanta, rounded down. It is a µs for every rule
// but a bucket (token, leaky, GCRA) whose refill is too long for the
// script's doubles in units of a µs (a prime rate above about 26000 a
// day): 1ms, or 1s, the finest that holds it. Such a bucket decides each
// request as the memory store decides it at the start of the request's
// quantum, and its waits end at a whole quantum. The error is the one
// CheckRule gives.
func (s *Store) Resolution(r *sluice.PreparedRule) (time.Duration, error) {
	sp := algo.Of(r)
	if sp == nil {
		return 0, errUnprepared
	}
	p, err := paramsOf(sp)
	if err != nil {
		return 0, err
	}
	return p.resolution(), nil
}

// Take decides a request against checks, all-or-nothing (but for
// usage, recorded whatever the request's fate: see Usage charges in the
// docs/redis.md), in one script run: see sluice.Store. The time
// is Redis TIME unless
// WithCallerTime. Errors are Redis's, ErrTimeout, ErrCircuitOpen,
// ErrCrossSlot, ErrOutOfRange, or the context's; a failed Take charged
// nothing, unless the script ran and its answer was lost (for a request
// in parts, a part's), or a give-back failed (Stats.GiveBackErrors).
//
// It goes in two steps: the request's arguments and keys (request), then
// the store's transport, behind its layers (the deny cache, the circuit
// breaker), chosen in New.
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
	return s.t.decide(ctx, p, out)
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
	if s.cache != nil {
		s.cache.cap.Store(int64(5 * t))
	}
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
	if err := s.keys.distinct(p.keys); err != nil {
		p.release()
		return nil, err
	}
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
