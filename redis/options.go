package redis

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Option configures a Store.
type Option func(*options) error

// options is what the Options set, for New.
type options struct {
	prefix       string
	tag          func(sluice.Check) string
	window       func(sluice.Check) string
	callerTime   bool
	timeout      time.Duration
	denyCache    int
	failures     int64
	maxInFlight  int
	cooldown     time.Duration
	clock        sluice.Clock
	autoPipeline bool
	batching     bool
	skew         time.Duration
	storeClock   bool // tests only: the store's clock with the caller's time
	maxBatch     int
	noSplit      bool
}

// defaults is the options of a Store that was given none: each Option
// says its default.
func defaults() options {
	return options{
		prefix:       "sluice:",
		timeout:      50 * time.Millisecond,
		denyCache:    10000,
		failures:     20,
		maxInFlight:  DefaultMaxInFlight,
		cooldown:     time.Second,
		clock:        sluice.SystemClock,
		autoPipeline: true,
		batching:     true,
		maxBatch:     64,
	}
}

// WithPrefix sets the prefix of every key. The default is "sluice:". It
// must not contain '{' or '}', which would take the hash tag's place.
func WithPrefix(p string) Option {
	return func(o *options) error {
		for i := 0; i < len(p); i++ {
			if p[i] == '{' || p[i] == '}' {
				return fmt.Errorf("redis: prefix %q has a brace", p)
			}
		}
		o.prefix = p
		return nil
	}
}

// WithCallerTime decides at the now passed to Take, truncated to the
// microsecond, instead of Redis TIME. Every process must then agree on
// the time, so their Limiters should read the wall clock,
// sluice.ClockFunc(time.Now): sluice.SystemClock, the default, stays
// ahead of it after it steps back. Keys still expire in Redis time, but
// their TTLs are a rule's longest live state and a second (see Keys and
// Redis Cluster in docs/redis.md): a caller whose clock runs
// up to a second behind Redis's finds its state (WithClockSkew for more). See Deadlines and clocks
// in docs/redis.md.
func WithCallerTime() Option { return func(o *options) error { o.callerTime = true; return nil } }

// WithClockSkew sets how far behind Redis's clock the callers' clocks may
// run, with WithCallerTime, and still find their keys' state: every key's
// TTL is its state's longest life and that much slack (see Keys and Redis
// Cluster in docs/redis.md), so that a key does not expire in
// Redis's time while its state still counts at a caller's. The default,
// and the least, is a second; a longer one keeps idle keys in Redis as
// much longer.
func WithClockSkew(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("redis: clock skew %v, want at least 0", d)
		}
		o.skew = d
		return nil
	}
}

// WithTimeout bounds each call to Redis from the moment it is written,
// whatever the caller's context allows, and bounds as much a request's
// wait for its turn (a place in flight and in a run) before it is
// written. It is the one deadline sluice sets on a call to its store: a
// sluice.Limiter passes its caller's context through. The default is
// 50ms; 0 leaves both to the context. See Deadlines and clocks in
// docs/redis.md.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error { o.timeout = max(d, 0); return nil }
}

// WithoutSplit has a Store on a Cluster or a Ring refuse, with
// ErrCrossSlot, a request that one script run cannot decide — its keys on
// more than one master of a Cluster (in more than one slot WithoutBatching,
// more than one tag on a Ring) — rather than decide it in parts by taking
// and giving back (see Requests across slots in the package
// documentation). Every request is then decided in one run, and such a
// request refused unless WithHashTag joins its keys.
func WithoutSplit() Option {
	return func(o *options) error {
		o.noSplit = true
		return nil
	}
}

// WithHashTag sets the Redis Cluster hash tag of a check's keys. The
// default is the check's key: the rules of one entity share a slot, and a
// request whose checks have different keys (per IP and per user) may sit
// on different masters, and is then decided in parts (see Requests across
// slots in docs/redis.md), or refused with ErrCrossSlot under
// WithoutSplit. A tag common to a request's checks, such as the user of a
// per-user and a per-user-and-route check, keeps it in one script run; a
// constant tag puts every key in one slot. Outside a cluster the
// tag only names keys. The function must be deterministic per check.
func WithHashTag(f func(sluice.Check) string) Option {
	return func(o *options) error { o.tag = f; return nil }
}

// WithWindowKeys names the counters of fixed windows by f, for a store
// that must share them with another program counting the same windows,
// as envoyproxy/ratelimit does during a rolling swap from it to sluice
// serve. Under the store's clock (a single Redis or Sentinel, at Redis
// TIME: not on a Cluster or a Ring, nor with WithCallerTime), a fixed
// window of a whole number of seconds is a plain counter per window, an
// integer other programs can INCRBY too; if f returns a non-empty string
// for the check, the counter's key is that string followed by the
// window's start in Unix seconds, with no prefix added, in place of
// sluice's own name. f returns "" to keep sluice's name; it must be
// deterministic per check and name no two checks of one request alike.
func WithWindowKeys(f func(sluice.Check) string) Option {
	return func(o *options) error { o.window = f; return nil }
}

// WithDenyCache sets how many denials are remembered locally until their
// RetryAfter, so that a flood against one key does not reach Redis. The
// default is 10000; 0 turns the cache off. Only a request of the same cost
// is answered from the cache: the same request gets the decisions Redis
// gave, their waits shortened by the time since (Remaining is as of the
// denial); another request denied by the same check gets that check's
// decision and, for its other checks, not consulted, their full quota.
// The decisions the cache answers are marked Cached. Times are the caller's with WithCallerTime, else the breaker's clock
// (WithBreakerClock).
func WithDenyCache(entries int) Option {
	return func(o *options) error { o.denyCache = max(entries, 0); return nil }
}

// WithBreaker sets the circuit breaker: it opens when, over the last 10
// seconds, at least calls calls were written to Redis and at least half
// of them failed (an error reply, a refused or broken connection, no
// answer within WithTimeout from a Redis that answered nothing for a
// second), and then fails every call at once for cooldown before it lets
// one probe through. Calls shed are not counted: waiting for a turn, or
// a late answer from a Redis that answers others, is load, not failure
// (see Load in docs/redis.md). The default is 20 calls and 1s; 0 calls
// turns the breaker off.
func WithBreaker(calls int, cooldown time.Duration) Option {
	return func(o *options) error {
		o.failures, o.cooldown = int64(max(calls, 0)), max(cooldown, 0)
		return nil
	}
}

// DefaultMaxInFlight is WithMaxInFlight's default. A run carries at most
// WithMaxBatch requests (64 by default), two runs go out at once, and the
// rest wait their turn: 1024 is a queue of eight rounds of two full runs,
// which a Redis decides in a few milliseconds, well within the store's
// timeout, while a few hundred KiB hold them.
const DefaultMaxInFlight = 1024

// WithMaxInFlight bounds the requests in flight towards one Redis (the
// store's, or each master of a Cluster, each with its own bound): queued
// for a run or in one. A request that finds no room waits for it until
// its caller's deadline or the store's timeout, whichever comes first,
// and is then shed: Take returns an error wrapping sluice.ErrShed, having
// written and charged nothing, and the Limiter denies it. The default is
// DefaultMaxInFlight.
func WithMaxInFlight(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("redis: max in flight %d, want at least 1", n)
		}
		o.maxInFlight = n
		return nil
	}
}

// WithBreakerClock sets the clock of the circuit breaker's cooldown and
// window, and of the second of silence after which a Redis that does not
// answer in time is failing rather than loaded, which, at Redis TIME, the
// denial cache reads too, and the store's guess
// of a fixed window's window, which Redis TIME corrects when it is wrong
// (a wrong guess only costs the script a string per request). The default is
// sluice.SystemClock. It is not the time of decisions: that is Redis TIME,
// or with WithCallerTime the caller's. See Deadlines and clocks in
// docs/redis.md.
func WithBreakerClock(c sluice.Clock) Option {
	return func(o *options) error {
		if c != nil {
			o.clock = c
		}
		return nil
	}
}

// WithoutAutoPipeline sends each script run on a connection of its own
// instead of through the client's autopipeliner, which a Store uses only
// for the runs it does not batch: WithoutBatching, and on a
// Cluster the runs per slot that follow a moved slot. A Ring's runs go
// each on a connection of their own whatever the option: go-redis has no
// autopipeliner for a Ring.
func WithoutAutoPipeline() Option {
	return func(o *options) error { o.autoPipeline = false; return nil }
}

// WithoutBatching sends each request in a script run of its own. By
// default, on a single Redis and on each master of a Cluster (not on a
// Ring), requests that arrive while a run is out are decided together in
// the next run, each all-or-nothing and in order. On a Cluster, it also
// sends each run through the cluster client, so a request's keys must
// then share a slot to be decided in one run.
func WithoutBatching() Option { return func(o *options) error { o.batching = false; return nil } }

// WithMaxBatch bounds the requests decided in one script run, and so the
// time Redis spends in one. The default is 64; 1 sends each request in a
// run of its own, as WithoutBatching does. Larger runs cost Redis less
// per decision (the call, its parsing and TIME are shared) and make each
// caller wait for more decisions than its own.
func WithMaxBatch(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("redis: max batch %d, want at least 1", n)
		}
		o.maxBatch = n
		return nil
	}
}
