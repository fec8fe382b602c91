package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Pair is a sluice.Store over two Redis stores, each check decided by the
// one its rule goes to: envoyproxy/ratelimit's REDIS_PERSECOND, a Redis of
// its own for the per-second limits, which are the busiest. A request
// whose checks go to one store is that store's. A request with checks on
// both is decided all-or-nothing as a request across Cluster masters is:
// a part on each, taken at once, and the part that charged given back if
// the other denies (see Requests across slots in the package
// documentation). Such a request is not served from the stores' denial
// caches.
type Pair struct {
	main, second *Store
	toSecond     func(sluice.Rule) bool
}

var (
	_ sluice.Store       = (*Pair)(nil)
	_ sluice.RuleChecker = (*Pair)(nil)
)

// NewPair returns a Pair deciding the checks whose rule toSecond picks in
// second and the others in main. The stores must be two, on different
// Redis: their keys may be named alike.
func NewPair(main, second *Store, toSecond func(sluice.Rule) bool) (*Pair, error) {
	if main == nil || second == nil || toSecond == nil {
		return nil, errors.New("redis: a pair needs two stores and a rule's route")
	}
	if main == second {
		return nil, errors.New("redis: a pair of one store")
	}
	main.capDenials()
	second.capDenials()
	return &Pair{main: main, second: second, toSecond: toSecond}, nil
}

// ToSecondStore is NewPair's route for REDIS_PERSECOND: it reports
// whether r goes to the Pair's per-second store, as envoyproxy/ratelimit
// counts a limit of unit second in its per-second Redis.
func ToSecondStore(r sluice.Rule) bool { return r.Limit.Period == time.Second }

// store is the store of checks with rule r.
func (pr *Pair) store(r *sluice.PreparedRule) *Store {
	if r != nil && pr.toSecond(r.Rule()) {
		return pr.second
	}
	return pr.main
}

// CheckRule reports whether r's store can hold r: see Store.CheckRule.
func (pr *Pair) CheckRule(r *sluice.PreparedRule) error { return pr.store(r).CheckRule(r) }

// Take decides a request against checks, all-or-nothing: see
// sluice.Store and Store.Take.
func (pr *Pair) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	second := 0
	for i := range checks {
		if checks[i].Rule == nil {
			return fmt.Errorf("redis: check %d has no rule", i)
		}
		if pr.store(checks[i].Rule) == pr.second {
			second++
		}
	}
	switch second {
	case 0:
		return pr.main.Take(ctx, now, checks, out)
	case len(checks):
		return pr.second.Take(ctx, now, checks, out)
	}
	if len(out) < len(checks) {
		return fmt.Errorf("redis: %d decisions for %d checks", len(out), len(checks))
	}
	if ctx.Err() != nil {
		return stopped(ctx) // its deadline came before its turn: shed
	}
	r := pr.split(checks)
	// A second attempt, after a Cluster's slot moved, goes through the
	// cluster client.
	for attempt := range 2 {
		err := r.decide(ctx, now, attempt > 0, out)
		if err != errMoved {
			return err
		}
		for _, sb := range r {
			sb.s.t.moved(ctx)
		}
	}
	return errMoved
}

// pairRequest is a request with checks on both of a Pair's stores: each
// store's checks, decided in parts together (see split.go).
type pairRequest [2]pairSub

// pairSub is a request's checks on one of a Pair's stores.
type pairSub struct {
	s      *Store
	checks []sluice.Check
	idx    []int // in the request's checks
}

// split is the request of checks, each on its store.
func (pr *Pair) split(checks []sluice.Check) pairRequest {
	r := pairRequest{{s: pr.main}, {s: pr.second}}
	for i, c := range checks {
		j := 0
		if pr.store(c.Rule) == pr.second {
			j = 1
		}
		r[j].checks = append(r[j].checks, c)
		r[j].idx = append(r[j].idx, i)
	}
	return r
}

// decide decides r at now, its parts on each store's nodes, or through
// each store's client (byClient: see transport.parts).
func (r *pairRequest) decide(ctx context.Context, now time.Time, byClient bool, out []sluice.Decision) error {
	var all []*part
	var ps [2]*pending
	defer func() {
		for _, p := range ps {
			if p != nil {
				p.release()
			}
		}
	}()
	for k, sb := range r {
		p, err := sb.s.request(now, sb.checks)
		if err != nil {
			return err
		}
		ps[k] = p
		parts, err := sb.s.t.parts(ctx, p, byClient)
		if err != nil {
			return err
		}
		for _, pt := range parts {
			for k, i := range pt.idx {
				pt.idx[k] = sb.idx[i]
			}
		}
		all = append(all, parts...)
	}
	return r[0].s.split(ctx, all, out)
}

// Load loads the script into both stores' Redis: see Store.Load.
func (pr *Pair) Load(ctx context.Context) error {
	if err := pr.main.Load(ctx); err != nil {
		return err
	}
	return pr.second.Load(ctx)
}

// Counters is Stats in plain types, as Store.Counters gives them.
func (pr *Pair) Counters() (counts map[string]int64, breaker string) { return pr.Stats().counters() }

// Stats is the two stores' counters, added; Breaker is the worse of the
// two stores' states: open if either is.
func (pr *Pair) Stats() Stats {
	a, b := pr.main.Stats(), pr.second.Stats()
	st := Stats{
		Calls:          a.Calls + b.Calls,
		Runs:           a.Runs + b.Runs,
		Errors:         a.Errors + b.Errors,
		Timeouts:       a.Timeouts + b.Timeouts,
		Reloads:        a.Reloads + b.Reloads,
		Rejected:       a.Rejected + b.Rejected,
		Shed:           a.Shed + b.Shed,
		CacheHits:      a.CacheHits + b.CacheHits,
		Splits:         a.Splits + b.Splits,
		GiveBacks:      a.GiveBacks + b.GiveBacks,
		GiveBackErrors: a.GiveBackErrors + b.GiveBackErrors,
		Moved:          a.Moved + b.Moved,
		Breaker:        a.Breaker,
		BreakerOpens:   a.BreakerOpens + b.BreakerOpens,
	}
	for _, state := range []string{"open", "half-open"} {
		if a.Breaker == state || b.Breaker == state {
			st.Breaker = state
			break
		}
	}
	return st
}
