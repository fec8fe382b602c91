// Package rlqstest is a client of Envoy's Rate Limit Quota Service
// (RLQS) that behaves as Envoy's rate_limit_quota HTTP filter does, by
// the documentation of its protos (envoy.service.rate_limit_quota.v3 and
// envoy.extensions.filters.http.rate_limit_quota.v3): the test double
// sluice's RLQS is tested against, where no Envoy binary is at hand. It
// is for tests, not for serving.
//
// What it does as the filter does: a request maps to a bucket (here
// through a function the test gives, not the xDS matcher tree); the first
// request of a bucket is reported at once, which subscribes the stream to
// its assignments, and each bucket is reported every reporting_interval
// after; until the first assignment the bucket follows
// no_assignment_behavior (by default allow all); an assignment replaces
// the active one, and is reported at once, when its strategy differs or
// the active one has expired, and else extends it; an assignment expires
// after its assignment_time_to_live (at once for zero, never when unset),
// and the bucket then follows expired_assignment_behavior
// (fallback_rate_limit or reuse_last_assignment) for its timeout, then is
// abandoned; without expired_assignment_behavior it is abandoned at once;
// an AbandonAction erases the bucket. A token bucket refills continuously,
// tokens_per_fill per fill_interval, and starts full, as Envoy's token
// bucket does. When a stream breaks, the client opens one to the next
// address and reports every bucket on it at once.
package rlqstest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	quotapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is a Client's configuration.
type Config struct {
	// Domain is the filter's domain, sent in each stream's first report.
	Domain string
	// Bucket maps a request to its bucket id and the bucket's settings,
	// as the filter's bucket_matchers do; a nil id leaves the request
	// unmatched: allowed and not reported. A nil ReportingInterval in the
	// settings is taken as one second.
	Bucket func(req any) (id map[string]string, settings *quotapb.RateLimitQuotaBucketSettings)
	// Conns are the RLQS servers, tried in turn: a stream that breaks is
	// opened again to the next.
	Conns []grpc.ClientConnInterface
}

// The states of a bucket, as the filter's docs name them.
const (
	NoAssignment = "no assignment"
	Active       = "active"
	Expired      = "expired"
	Abandoned    = "abandoned" // not tracked: never seen, or erased
)

// Client is one Envoy's filter. Make one with New, run it with Run; Allow
// is safe for concurrent use.
type Client struct {
	cfg     Config
	mu      sync.Mutex
	buckets map[string]*bucket
	urgent  chan struct{} // a report is due at once
	streams int           // streams opened
	lastErr error         // the last stream's end
}

type bucket struct {
	id       *rlqspb.BucketId
	settings *quotapb.RateLimitQuotaBucketSettings
	// allowed and denied since the last report, and its time
	allowed, denied uint64
	reported        time.Time
	urgent          bool // to report at once
	state           string
	strategy        *typepb.RateLimitStrategy // the active (or last active) assignment's
	limiter         *limiter                  // the strategy's
	fallback        *limiter                  // no_assignment or expired fallback_rate_limit's
	expires         time.Time                 // the active assignment's end; zero: never
	expired         time.Time                 // when it expired
}

// New returns a client of cfg; Run serves its streams.
func New(cfg Config) *Client {
	return &Client{cfg: cfg, buckets: make(map[string]*bucket), urgent: make(chan struct{}, 1)}
}

// Allow decides a request at now: the bucket's assignment, or the
// behaviour its state calls for, and counts it for the next report.
func (c *Client) Allow(req any, now time.Time) bool {
	id, set := c.cfg.Bucket(req)
	if id == nil {
		return true
	}
	key := keyOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.current(key, now)
	if b == nil {
		b = &bucket{id: &rlqspb.BucketId{Bucket: maps.Clone(id)}, settings: set, state: NoAssignment, urgent: true, reported: now}
		if f := set.GetNoAssignmentBehavior().GetFallbackRateLimit(); f != nil {
			b.fallback = newLimiter(f, now)
		}
		c.buckets[key] = b
		c.wake()
	}
	var ok bool
	switch {
	case b.state == Active:
		ok = b.limiter.allow(now)
	case b.state == Expired && b.settings.GetExpiredAssignmentBehavior().GetReuseLastAssignment() != nil:
		ok = b.limiter.allow(now)
	default: // no assignment, or expired with a fallback (or none: allow)
		ok = b.fallback.allow(now)
	}
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

// Drive sends req through Allow at rate a second until ctx ends, the
// count reckoned from the time passed, so that a loaded machine keeps
// the rate where a fixed pace would fall behind.
func (c *Client) Drive(ctx context.Context, req any, rate float64) {
	start, sent := time.Now(), 0.0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for ; sent < rate*now.Sub(start).Seconds(); sent++ {
				c.Allow(req, now)
			}
		}
	}
}

// age moves b to the state its times call for at now: an active
// assignment past its TTL expires, and an expired one past the expired
// behaviour's timeout is abandoned.
func (c *Client) age(key string, b *bucket, now time.Time) {
	if b.state == Active && !b.expires.IsZero() && !now.Before(b.expires) {
		b.state, b.expired = Expired, b.expires
		eb := b.settings.GetExpiredAssignmentBehavior()
		b.fallback = nil
		if f := eb.GetFallbackRateLimit(); f != nil {
			b.fallback = newLimiter(f, now)
		}
	}
	if b.state == Expired {
		eb := b.settings.GetExpiredAssignmentBehavior()
		if eb == nil || now.Sub(b.expired) >= eb.GetExpiredAssignmentBehaviorTimeout().AsDuration() {
			delete(c.buckets, key)
		}
	}
}

// current is key's bucket aged to now, nil if it has none or it was
// abandoned, with c.mu held.
func (c *Client) current(key string, now time.Time) *bucket {
	if b := c.buckets[key]; b != nil {
		c.age(key, b, now)
	}
	return c.buckets[key]
}

// State is a bucket's state at now, and its active (or last active)
// strategy.
func (c *Client) State(id map[string]string, now time.Time) (string, *typepb.RateLimitStrategy) {
	key := keyOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.current(key, now)
	if b == nil {
		return Abandoned, nil
	}
	return b.state, b.strategy
}

// Streams is how many streams the client has opened.
func (c *Client) Streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams
}

// Err is how the last stream ended, nil while the first is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

func (c *Client) wake() {
	select {
	case c.urgent <- struct{}{}:
	default:
	}
}

// Run keeps a stream open to one of Conns, in turn, and reports on it,
// until ctx ends.
func (c *Client) Run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		err := c.stream(ctx, c.cfg.Conns[i%len(c.cfg.Conns)])
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		t := time.NewTimer(20 * time.Millisecond) // a pause between streams, as Envoy's backoff
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// stream runs one stream until it breaks or ctx ends.
func (c *Client) stream(ctx context.Context, conn grpc.ClientConnInterface) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.streams++
	// A new stream subscribes again: every bucket is reported on it at
	// once.
	for _, b := range c.buckets {
		b.urgent = true
	}
	c.mu.Unlock()
	c.wake()
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			c.Apply(resp, time.Now())
		}
	}()
	first := true
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			return err
		case <-c.urgent:
		case <-tick.C:
		}
		if m := c.Reports(time.Now()); m != nil {
			if first {
				m.Domain, first = c.cfg.Domain, false
			}
			if err := st.Send(m); err != nil {
				if errors.Is(err, context.Canceled) {
					return err
				}
				return <-recvErr // the stream's status
			}
		}
	}
}

// Reports is the report due at now: the buckets to report at once and
// those whose reporting_interval has passed; nil for none. Run sends it;
// a simulation in explicit time calls it itself.
func (c *Client) Reports(now time.Time) *rlqspb.RateLimitQuotaUsageReports {
	c.mu.Lock()
	defer c.mu.Unlock()
	var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for key, b := range c.buckets {
		c.age(key, b, now)
		if c.buckets[key] == nil {
			continue
		}
		every := time.Second
		if ri := b.settings.GetReportingInterval(); ri != nil {
			every = ri.AsDuration()
		}
		if !b.urgent && now.Sub(b.reported) < every {
			continue
		}
		us = append(us, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: b.id, TimeElapsed: durationpb.New(now.Sub(b.reported)),
			NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied, b.reported, b.urgent = 0, 0, now, false
	}
	if len(us) == 0 {
		return nil
	}
	return &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: us}
}

// Apply takes the server's actions at now, in order. Run calls it with
// each response; a simulation in explicit time calls it itself.
func (c *Client) Apply(resp *rlqspb.RateLimitQuotaResponse, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, act := range resp.GetBucketAction() {
		key := keyOf(act.GetBucketId().GetBucket())
		b := c.buckets[key]
		if b == nil {
			continue // not subscribed, or erased meanwhile
		}
		if act.GetAbandonAction() != nil {
			delete(c.buckets, key)
			continue
		}
		qa := act.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		c.age(key, b, now)
		if c.buckets[key] == nil {
			continue
		}
		st := qa.GetRateLimitStrategy()
		if st == nil {
			st = &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{}} // unset: allow all
		}
		if b.state != Active || !proto.Equal(st, b.strategy) {
			b.strategy, b.limiter = st, newLimiter(st, now)
			b.state, b.urgent = Active, true
			c.wake()
		}
		b.expires = time.Time{}
		if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
			b.expires = now.Add(ttl.AsDuration())
		}
		c.age(key, b, now) // a zero TTL expires it at once
	}
}

// keyOf is a bucket id's identity: its keys sorted, as the order of a
// map's keys does not matter.
func keyOf(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(id[k]))
		b.WriteByte(',')
	}
	return b.String()
}

// limiter applies a RateLimitStrategy locally.
type limiter struct {
	all, none bool // blanket rules
	// a token bucket: tokens (in units of 1/rate ns... kept as float64),
	// its capacity and refill per second
	tokens, max, perSec float64
	last                time.Time
}

func newLimiter(st *typepb.RateLimitStrategy, now time.Time) *limiter {
	switch s := st.GetStrategy().(type) {
	case *typepb.RateLimitStrategy_BlanketRule_:
		return &limiter{all: s.BlanketRule == typepb.RateLimitStrategy_ALLOW_ALL, none: s.BlanketRule == typepb.RateLimitStrategy_DENY_ALL}
	case *typepb.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		fill := uint32(1)
		if tb.GetTokensPerFill() != nil {
			fill = tb.GetTokensPerFill().GetValue()
		}
		l := &limiter{max: float64(tb.GetMaxTokens()), last: now}
		if iv := tb.GetFillInterval().AsDuration(); iv > 0 {
			l.perSec = float64(fill) / iv.Seconds()
		}
		l.tokens = l.max
		return l
	case *typepb.RateLimitStrategy_RequestsPerTimeUnit_:
		n := float64(s.RequestsPerTimeUnit.GetRequestsPerTimeUnit())
		unit := map[typepb.RateLimitUnit]time.Duration{typepb.RateLimitUnit_SECOND: time.Second, typepb.RateLimitUnit_MINUTE: time.Minute,
			typepb.RateLimitUnit_HOUR: time.Hour, typepb.RateLimitUnit_DAY: 24 * time.Hour}[s.RequestsPerTimeUnit.GetTimeUnit()]
		l := &limiter{max: n, tokens: n, last: now}
		if unit > 0 {
			l.perSec = n / unit.Seconds()
		}
		return l
	}
	return &limiter{all: true}
}

// allow takes a token at now, if the strategy has one; a nil limiter
// allows.
func (l *limiter) allow(now time.Time) bool {
	switch {
	case l == nil || l.all:
		return true
	case l.none:
		return false
	}
	if d := now.Sub(l.last); d > 0 {
		l.tokens = min(l.max, l.tokens+d.Seconds()*l.perSec)
		l.last = now
	}
	if l.tokens >= 1 {
		l.tokens--
		return true
	}
	return false
}
