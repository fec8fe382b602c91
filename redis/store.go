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
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

//go:embed take.lua
var takeScript string

var takeSHA = func() string {
	h := sha1.Sum([]byte(takeScript))
	return hex.EncodeToString(h[:])
}()

// The script and its hash as arguments, boxed once.
var takeScriptArg, takeSHAArg any = takeScript, takeSHA

// Errors a Take can return besides those of Redis and the context.
var (
	// ErrCircuitOpen is returned, at once, while the circuit breaker is
	// open after consecutive failures.
	ErrCircuitOpen = errors.New("redis: circuit open: recent calls failed")
	// ErrCrossSlot is returned for a request whose checks hash to more
	// than one Redis Cluster slot: they cannot be decided atomically, so
	// none is decided. Give them a common hash tag with WithHashTag. It
	// wraps sluice.ErrRefused.
	ErrCrossSlot = fmt.Errorf("redis: checks of one request in different cluster slots: %w", sluice.ErrRefused)
	// ErrTimeout is returned when Redis did not answer within the
	// deadline set by WithTimeout. It wraps context.DeadlineExceeded.
	ErrTimeout = fmt.Errorf("redis: no answer in time: %w", context.DeadlineExceeded)
)

// Store is a sluice.Store in Redis. It is safe for concurrent use. It
// keeps no goroutine running: see New for the one a call may wait in.
type Store struct {
	client   goredis.UniversalClient
	ap       *goredis.AutoPipeliner // nil without autopipelining
	cluster  bool                   // checks must share a slot
	ring     bool                   // checks must share a tag
	prefix   string
	tag      func(sluice.Check) string
	timeout  time.Duration
	caller   bool
	cacheMax int
	cache    *denyCache
	br       breaker
	noPipe   bool
	// ctxTimeouts: the client honours a context's deadline itself
	ctxTimeouts bool
	noBatch     bool
	batch       *batcher      // nil without batching
	ttlSlack    time.Duration // tests only, see export_test.go

	mu     sync.RWMutex
	params map[*sluice.Rule]*params

	st counters
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on client: a *goredis.Client, a Sentinel failover
// client, a *goredis.ClusterClient or a *goredis.Ring. It does not contact
// Redis; the script is loaded by the first call that needs it.
//
// The Store does not own client. Without batching, it uses the client's
// shared asynchronous autopipeliner (unless WithoutAutoPipeline), which
// the client releases when closed. A client with ContextTimeoutEnabled is
// called directly; otherwise a call waits aside, in a goroutine that ends
// when the client's own timeouts end it, so that WithTimeout holds.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: nil client")
	}
	s := &Store{
		client:   client,
		prefix:   "sluice:",
		timeout:  50 * time.Millisecond,
		cacheMax: 10000,
		br:       breaker{threshold: 5, cooldown: time.Second, clock: sluice.SystemClock},
		params:   make(map[*sluice.Rule]*params),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	switch c := client.(type) {
	case *goredis.Client:
		s.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		s.cluster = true
		s.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		s.ring = true
		s.ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	if s.cacheMax > 0 {
		s.cache = newDenyCache(s.cacheMax)
	}
	if !s.noBatch && !s.cluster && !s.ring {
		s.batch = &batcher{s: s}
	}
	if s.batch == nil && !s.noPipe {
		ap, err := client.AsyncAutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("redis: autopipeline: %w", err)
		}
		s.ap = ap
	}
	return s, nil
}

// Stats counts what a Store did since New.
type Stats struct {
	Calls     int64 // requests sent to Redis
	Runs      int64 // script runs: a run decides a batch of requests
	Errors    int64 // calls that failed, timeouts included
	Timeouts  int64 // calls without an answer within the deadline
	Reloads   int64 // NOSCRIPT answers, after which the script was sent again
	Rejected  int64 // calls refused at once by the open circuit
	CacheHits int64 // requests denied from the local denial cache
	Breaker   string
}

type counters struct {
	calls, runs, errors, timeouts, reloads, rejected, hits atomic.Int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls:     s.st.calls.Load(),
		Runs:      s.st.runs.Load(),
		Errors:    s.st.errors.Load(),
		Timeouts:  s.st.timeouts.Load(),
		Reloads:   s.st.reloads.Load(),
		Rejected:  s.st.rejected.Load(),
		CacheHits: s.st.hits.Load(),
		Breaker:   s.br.state(),
	}
}

// CheckRule reports whether the store can hold r (see sluice.RuleChecker):
// nil, or the error a Take with r would return, which wraps ErrOutOfRange
// (and so sluice.ErrRefused) for a limit outside the exact range.
func (s *Store) CheckRule(r *sluice.Rule) error {
	_, err := newParams(r)
	return err
}

var _ sluice.RuleChecker = (*Store)(nil)

// paramsFor returns r's prepared arguments, computing them on first use
// and again if r changed.
func (s *Store) paramsFor(r *sluice.Rule) (*params, error) {
	s.mu.RLock()
	p := s.params[r]
	s.mu.RUnlock()
	if p != nil && p.rule == *r {
		return p, nil
	}
	p, err := newParams(r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if len(s.params) >= 4096 {
		clear(s.params) // rules are few; a flood of new ones must not grow this
	}
	s.params[r] = p
	s.mu.Unlock()
	return p, nil
}

// Take decides a request of cost n against checks, all-or-nothing, in one
// script run: see sluice.Store. The time is Redis TIME unless
// WithCallerTime. Errors are Redis's, ErrTimeout, ErrCircuitOpen,
// ErrCrossSlot, ErrOutOfRange, or the context's; a failed Take charged
// nothing, unless the script ran and its answer was lost.
func (s *Store) Take(ctx context.Context, now time.Time, n int64, checks []sluice.Check, out []sluice.Decision) error {
	if len(out) < len(checks) {
		return fmt.Errorf("redis: %d decisions for %d checks", len(out), len(checks))
	}
	if len(checks) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The request, with room for the parameters, costs and keys of a few
	// checks inside it: one allocation instead of four.
	p := &pending{}
	ps, costs := p.psBuf[:], p.costBuf[:]
	if len(checks) > len(ps) {
		ps, costs = make([]*params, len(checks)), make([]int64, len(checks))
	}
	ps, costs = ps[:len(checks)], costs[:len(checks)]
	nkeys := 0
	charges := true // every check costs more than 0: denials may be cached
	for i := range checks {
		if checks[i].Rule == nil {
			return fmt.Errorf("redis: check %d has no rule", i)
		}
		pr, err := s.paramsFor(checks[i].Rule)
		if err != nil {
			return err
		}
		ps[i] = pr
		nkeys += pr.nkeys()
		costs[i] = checks[i].CostFor(n)
		charges = charges && costs[i] > 0
	}
	keys := p.keyBuf[:0]
	if nkeys > len(p.keyBuf) {
		keys = make([]string, 0, nkeys)
	}
	for i, c := range checks {
		tag := c.Key
		if s.tag != nil {
			tag = s.tag(c)
		}
		k := stateKey(s.prefix, tag, c.Key, c.Rule.Name, ps[i].code, s.tag != nil)
		keys = append(keys, k)
		if ps[i].kind == kindLog {
			keys = append(keys, k+":e")
		}
	}
	if err := s.sameNode(keys, checks); err != nil {
		return err
	}
	// The denial cache's time: the caller's when it decides, truncated to
	// the µs as the script reads it (a denial's RetryAfter counts from
	// there), else this process's clock, read before sending, so no later
	// than Redis's decision.
	cnow := now.Truncate(time.Microsecond)
	if s.cache != nil && !s.caller {
		cnow = s.br.clock.Now()
	}
	if s.cache != nil && charges && s.cached(cnow, costs, checks, ps, keys, out) {
		s.st.hits.Add(1)
		return nil
	}
	nowUS := float64(redisTime)
	if s.caller {
		us, err := micros(now)
		if err != nil {
			return err
		}
		nowUS = float64(us) // exact: within 2^52
	}
	p.keys, p.now, p.ps, p.costs = keys, nowUS, ps, costs

	ok, probe := s.br.allow()
	if !ok {
		s.st.rejected.Add(1)
		return ErrCircuitOpen
	}
	s.st.calls.Add(1)
	if s.timeout > 0 {
		p.expires = time.Now().Add(s.timeout)
		p.deadline = p.expires
	}
	if dl, ok := ctx.Deadline(); ok && (p.deadline.IsZero() || dl.Before(p.deadline)) {
		p.deadline = dl
	}
	var reply []int64
	var err error
	if s.batch != nil {
		reply, err = s.batch.take(ctx, p)
	} else {
		cctx := ctx
		if !p.expires.IsZero() {
			var cancel context.CancelFunc
			cctx, cancel = context.WithDeadline(ctx, p.expires)
			defer cancel()
		}
		var replies [][]int64
		if replies, err = s.run(cctx, []*pending{p}); err == nil {
			reply = replies[0]
		}
	}
	if err != nil {
		if ctx.Err() != nil { // the caller gave up: nothing learnt of Redis
			s.br.abort(probe)
			return ctx.Err()
		}
		s.st.errors.Add(1)
		if errors.Is(err, context.DeadlineExceeded) && s.timeout > 0 {
			s.st.timeouts.Add(1)
			err = fmt.Errorf("%w (%v)", ErrTimeout, s.timeout)
		}
		s.br.done(probe, true)
		return err
	}
	s.br.done(probe, false)
	for i := range checks {
		r := reply[6*i : 6*i+6]
		out[i] = sluice.Decision{
			Allowed:    r[0] == 1,
			Limit:      ps[i].quota,
			Remaining:  r[1],
			RetryAfter: duration(r[2], r[3]),
			ResetAfter: duration(r[4], r[5]),
		}
	}
	if s.cache != nil && charges {
		s.remember(cnow, costs, checks, ps, keys, out)
	}
	return nil
}

// run decides a batch of requests in one script run: EVALSHA, and on
// NOSCRIPT (a restart, a failover, SCRIPT FLUSH) EVAL once, which loads it
// again. A NOSCRIPT answer means the script did not run, so nothing is
// charged twice. It returns each request's reply.
func (s *Store) run(ctx context.Context, batch []*pending) ([][]int64, error) {
	nkeys, size := 0, 0
	for _, p := range batch {
		nkeys += len(p.keys)
		size += 8 * (2 + 9*len(p.ps))
	}
	args := make([]any, 0, 3+nkeys+3)
	args = append(args, "evalsha", takeSHAArg, nkeys)
	for _, p := range batch {
		for _, k := range p.keys {
			args = append(args, k)
		}
	}
	req := make([]byte, 0, size)
	for _, p := range batch {
		req = p.appendTo(req)
	}
	args = append(args, s.ttlSlack.Milliseconds(), len(batch), req)
	s.st.runs.Add(1)
	reply, err := s.do(ctx, args)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		s.st.reloads.Add(1)
		args[0], args[1] = "eval", takeScriptArg
		reply, err = s.do(ctx, args)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: take: %w", err)
	}
	replies := make([][]int64, len(batch))
	for i, p := range batch {
		m := 6 * len(p.ps)
		if len(reply) < m {
			return nil, fmt.Errorf("redis: script answered %d values short", m-len(reply))
		}
		replies[i], reply = reply[:m:m], reply[m:]
	}
	if len(reply) != 0 {
		return nil, fmt.Errorf("redis: script answered %d values too many", len(reply))
	}
	return replies, nil
}

// redisTime as a request's now has the script read Redis TIME: 2^53 µs,
// outside the range micros allows.
const redisTime = 1 << 53

// appendTo appends p's values as the script unpacks them: now, the
// number of checks, then each check's params and cost. A cost is a double
// there as it was when the script read it as a decimal: float64 rounds
// alike.
func (p *pending) appendTo(b []byte) []byte {
	b = appendF64(b, p.now)
	b = appendF64(b, float64(len(p.ps)))
	for i, pp := range p.ps {
		b = append(b, pp.enc[:]...)
		b = appendF64(b, float64(p.costs[i]))
	}
	return b
}

// do sends one command and waits for its answer or the end of ctx.
func (s *Store) do(ctx context.Context, args []any) ([]int64, error) {
	cmd := goredis.NewCmd(ctx, args...)
	var err error
	switch {
	case s.ap != nil:
		err = s.ap.Submit(ctx, cmd).WaitContext(ctx)
	case s.ctxTimeouts:
		err = s.client.Process(ctx, cmd)
	default:
		// The client's own timeouts (ReadTimeout, 3s by default) bound
		// the call, not ctx: wait for it aside. The goroutine ends when
		// the client gives up.
		ch := make(chan error, 1)
		go func() { ch <- s.client.Process(ctx, cmd) }()
		select {
		case err = <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	b, err := cmd.Text()
	if err != nil {
		return nil, err
	}
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("redis: script answered %d bytes, not whole doubles", len(b))
	}
	reply := make([]int64, len(b)/8)
	for i := range reply {
		reply[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(b[8*i : 8*i+8]))))
	}
	return reply, nil
}

// sameNode checks that the keys of one request live on one node, so that
// one script can decide them.
func (s *Store) sameNode(keys []string, checks []sluice.Check) error {
	for i := 1; i < len(keys); i++ {
		for j := range i {
			if keys[i] == keys[j] {
				return fmt.Errorf("redis: two checks of one request on %q: %w", keys[i], sluice.ErrRefused)
			}
		}
	}
	switch {
	case s.cluster:
		sl := slot(keys[0])
		for _, k := range keys[1:] {
			if slot(k) != sl {
				return fmt.Errorf("%w: %q and %q (use WithHashTag)", ErrCrossSlot, keys[0], k)
			}
		}
	case s.ring:
		t := tagOf(keys[0])
		for _, k := range keys[1:] {
			if tagOf(k) != t {
				return fmt.Errorf("%w: %q and %q (use WithHashTag)", ErrCrossSlot, keys[0], k)
			}
		}
	}
	return nil
}

func tagOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					return key[i+1 : j]
				}
			}
		}
	}
	return key
}
