package protocol

import (
	"context"
	"math"
	"time"

	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
)

// The outcomes of an RLQS bucket, as Count receives them: what the
// bucket's subscription found, and a renewal the authority failed.
const (
	RLQSAssigned = "assigned"  // a token_bucket from the bucket's limits
	RLQSAllowAll = "allow_all" // unlimited: blanket ALLOW_ALL
	RLQSDenyAll  = "deny_all"  // requests_per_unit 0: blanket DENY_ALL
	RLQSShadow   = "shadow"    // every limit in shadow mode: ALLOW_ALL
	RLQSUnknown  = "unknown"   // no limit applies, or no such domain: no assignment
	RLQSRefused  = "refused"   // past the stream's bound on buckets: no assignment
	RLQSError    = "error"     // the authority failed a renewal: none sent
)

// blanketRenew and blanketTTL pace the assignments that need no share
// (ALLOW_ALL, DENY_ALL): a reload that changes the bucket's limits
// reaches the client within blanketRenew.
const (
	blanketRenew = 10 * time.Second
	blanketTTL   = 3 * blanketRenew
)

// rlqsPolicy is what the config being served says of a bucket.
type rlqsPolicy struct {
	result string // one of the RLQS results but RLQSRefused and RLQSError
	limits []rlqsLimit
	// renew and ttl pace the bucket's assignments: the shortest of its
	// limits' Lease.Renew (or their defaults) and that limit's TTL.
	renew, ttl time.Duration
}

// rlqsLimit is one enforced limit of a bucket, and the authority's key
// of its share.
type rlqsLimit struct {
	key  string
	rule sluice.Rule
}

// resolve finds the policy of a bucket's descriptor in snap.
func resolve(snap *Snapshot, domain string, entries []config.Entry) rlqsPolicy {
	ms, err := snap.Config.Match(domain, entries)
	if err != nil || len(ms) == 0 {
		// Looked at again a blanket renewal later: a reload may give
		// it a limit.
		return rlqsPolicy{result: RLQSUnknown, renew: blanketRenew, ttl: blanketTTL}
	}
	descs := [][]config.Match{ms}
	config.ApplyReplaces(descs)
	ms = descs[0]
	p := rlqsPolicy{result: RLQSShadow, renew: blanketRenew, ttl: blanketTTL}
	for _, m := range ms {
		switch {
		case m.Unlimited:
			return rlqsPolicy{result: RLQSAllowAll, renew: blanketRenew, ttl: blanketTTL}
		case m.ID < 0 || m.ID >= len(snap.Rules) || snap.Rules[m.ID].Rule.Shadow():
			continue
		}
		r := snap.Rules[m.ID].Declared
		if r.Limit.Rate == 0 {
			return rlqsPolicy{result: RLQSDenyAll, renew: blanketRenew, ttl: blanketTTL}
		}
		renew, ttl := shareTimes(r)
		if p.result != RLQSAssigned || renew < p.renew {
			p.renew, p.ttl = renew, ttl
		}
		p.result = RLQSAssigned
		p.limits = append(p.limits, rlqsLimit{key: "rlqs:" + lease.AuthorityKey(r.Name, m.Key), rule: r})
	}
	return p
}

// maxShareTTL is the longest TTL an authority keeps a share for.
const maxShareTTL = 7 * 24 * time.Hour

// shareTimes are a rule's renewal interval and the assignments' TTL: its
// Lease's times (sluice.Lease.Times). The authority keeps a share a TTL
// and a renewal, so the TTL is cut to leave that within maxShareTTL: a
// shorter TTL than configured keeps the bound, where a refused renewal
// would leave the bucket without an assignment.
func shareTimes(r sluice.Rule) (renew, ttl time.Duration) {
	renew, ttl = r.Lease.Times(r.Limit.Period)
	return renew, min(ttl, maxShareTTL-renew)
}

// leaseLimit is the limit the authority divides for l, and the factor its
// shares are multiplied by: a rate above sluice.MaxLeaseQuota, which the
// authorities refuse, is divided in units of k requests, rounded down, so
// that the shares still sum to at most the rate; a burst above it is cut
// to it, which only makes the token buckets smaller.
func leaseLimit(l sluice.Limit) (sluice.Limit, int64) {
	k := (l.Rate + sluice.MaxLeaseQuota - 1) / sluice.MaxLeaseQuota
	if k <= 1 {
		if l.Capacity() > sluice.MaxLeaseQuota {
			l.Burst = sluice.MaxLeaseQuota
		}
		return l, 1
	}
	s := sluice.Limit{Rate: l.Rate / k, Period: l.Period}
	if b := l.Capacity() / k; b != s.Rate {
		s.Burst = min(max(b, 1), sluice.MaxLeaseQuota)
	}
	return s, k
}

// assignment is a bucket's strategy and its time to live.
type assignment struct {
	strategy *typepb.RateLimitStrategy
	ttl      time.Duration
	// share, burst and period are the token bucket's, for observation:
	// share units per period.
	share, burst int64
	period       time.Duration
	holders      int   // the live holders of the limit the bucket follows
	demand       int64 // their total demand per period
}

func blanket(rule typepb.RateLimitStrategy_BlanketRule) *typepb.RateLimitStrategy {
	return &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

// assign renews the stream's share of each of p's limits with demand
// (units per second) and makes the bucket's assignment: the token bucket
// of the limit that leaves the least, so that the bucket keeps within
// every one. A share of 0 is DENY_ALL, which a token bucket cannot say.
// The authority keeps each share for the assignment's TTL and one renewal
// more, so that its count outlives the client's use of it, which starts
// when the assignment arrives.
//
// A rule whose rate is above sluice.MaxLeaseQuota is divided in units of
// several requests (leaseLimit).
func assign(ctx context.Context, auth lease.Authority, holder string, p rlqsPolicy, demand float64, now time.Time) (assignment, error) {
	switch p.result {
	case RLQSAllowAll, RLQSShadow:
		return assignment{strategy: blanket(typepb.RateLimitStrategy_ALLOW_ALL), ttl: p.ttl}, nil
	case RLQSDenyAll:
		return assignment{strategy: blanket(typepb.RateLimitStrategy_DENY_ALL), ttl: p.ttl}, nil
	}
	var a assignment
	burst := int64(math.MaxInt64)
	for i, l := range p.limits {
		limit, k := leaseLimit(l.rule.Limit)
		d := demand * l.rule.Limit.Period.Seconds() / float64(k)
		g, err := auth.Renew(ctx, lease.Request{
			Key: l.key, Holder: holder, Kind: lease.Bucket, Limit: limit,
			Demand: int64(min(max(d, 0), 1<<53)), TTL: p.ttl + p.renew, Now: now,
		})
		if err != nil {
			return assignment{}, err
		}
		if k > 1 {
			g.Share, g.Demand = g.Share*k, g.Demand*k
			g.Burst = min(g.Burst*k, l.rule.Limit.Capacity())
		}
		burst = min(burst, g.Burst)
		// share/period below the one kept so far: compared crosswise,
		// in float64, as both products may pass int64.
		if i == 0 || float64(g.Share)*float64(a.period) < float64(a.share)*float64(l.rule.Limit.Period) {
			a.share, a.period, a.holders, a.demand = g.Share, l.rule.Limit.Period, g.Holders, g.Demand
		}
	}
	a.burst, a.ttl = burst, p.ttl
	if a.share <= 0 {
		a.strategy = blanket(typepb.RateLimitStrategy_DENY_ALL)
		return a, nil
	}
	a.strategy = tokenBucket(a.share, a.burst, a.period, p.renew)
	return a, nil
}

// tokenBucket is the strategy of share units per period: tokens_per_fill
// k, about a tenth of a renewal interval's worth, every period·k/share
// (rounded up, so that the rate stays at or under the share), and
// max_tokens two fills, at most the burst's share (at least one token:
// Envoy requires max_tokens > 0).
//
// The bucket is kept small because a token bucket starts full (the
// proto's max_tokens "is also the number of tokens that the bucket
// initially contains"), and Envoy makes a new one for each assignment
// whose strategy differs from the active one: each change of a share
// then mints max_tokens. Two fills keep that to a fifth of a renewal's
// worth, at the cost of smoothing the stream's bursts.
func tokenBucket(share, burst int64, period, renew time.Duration) *typepb.RateLimitStrategy {
	const most = math.MaxUint32
	k := min(max(int64(float64(share)*float64(renew)/float64(10*period)), 1), most/2)
	fill := time.Duration(math.Ceil(float64(period) * float64(k) / float64(share)))
	return &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_TokenBucket{TokenBucket: &typepb.TokenBucket{
		MaxTokens:     uint32(min(max(min(burst, 2*k), 1), most)),
		TokensPerFill: wrapperspb.UInt32(uint32(k)),
		FillInterval:  durationpb.New(max(fill, 1)),
	}}}
}
