package protocol

import (
	"context"
	"math"
	"math/bits"
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

// shareTimes are a rule's renewal interval and the assignments' TTL: its
// Lease's times (sluice.Lease.Times). The authority keeps a share a TTL
// and a renewal, so the TTL is cut to leave that within lease.MaxTTL: a
// shorter TTL than configured keeps the bound, where a refused renewal
// would leave the bucket without an assignment.
func shareTimes(r sluice.Rule) (renew, ttl time.Duration) {
	renew, ttl = r.Lease.Times(r.Limit.Period)
	return renew, min(ttl, lease.MaxTTL-renew)
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

// rlqsKey is one of the authority's keys a stream holds a share of: the
// stream is one holder of it, whatever the number of its buckets that
// follow the key's limit, so that no client weighs more with the key, or
// takes more of its holders, by splitting its traffic into more buckets.
// The stream divides its share among those buckets: the part its demand
// fills in proportion to their demand at the share's renewal, the rest
// in equal parts.
type rlqsKey struct {
	key     string
	rule    sluice.Rule
	buckets map[*rlqsBucket]struct{}
	// grant is the last renewal's, in units per period (the rule's then),
	// asked the stream's demand it reported, and renewed its time (zero
	// before the first); tried is the last attempt's, which paces the
	// next after a failure. every and hold are the renewal interval and
	// the authority's TTL it was made with.
	grant          lease.Grant
	period         time.Duration
	asked          int64
	renewed, tried time.Time
	every, hold    time.Duration
	// weights are the buckets' demand at the renewal (integers, so that
	// the parts never sum past the share), and sum their total.
	weights map[*rlqsBucket]uint64
	sum     uint64
}

// weightUnit is the fraction of a request a second that a bucket's weight
// counts in; maxWeightRate bounds the demand it counts, so that the
// weights of as many buckets as a stream may hold (at most 2^20) sum
// within 64 bits.
const (
	weightUnit    = 1024
	maxWeightRate = 1 << 30
)

// renewKey renews the stream's share of k with the demand of its buckets
// together (units per second), for the authority's TTL of k's buckets.
func renewKey(ctx context.Context, auth lease.Authority, holder string, k *rlqsKey, now time.Time) error {
	k.tried = now
	weights := make(map[*rlqsBucket]uint64, len(k.buckets))
	var sum uint64
	rate := 0.0
	var every, hold time.Duration
	for b := range k.buckets {
		r := min(max(b.rate, 0), maxWeightRate)
		w := uint64(math.Round(r * weightUnit))
		weights[b] = w
		sum += w
		rate += r
		if every == 0 || b.policy.renew < every {
			every = b.policy.renew
		}
		// The authority keeps the share a renewal past the longest TTL
		// sent, so that its count outlives the client's use of it,
		// which starts when the assignment arrives.
		hold = max(hold, b.policy.ttl+b.policy.renew)
	}
	limit, f := leaseLimit(k.rule.Limit)
	d := min(max(rate*k.rule.Limit.Period.Seconds(), 0), 1<<53)
	g, err := auth.Renew(ctx, lease.Request{
		Key: k.key, Holder: holder, Kind: lease.Bucket, Limit: limit,
		Demand: int64(d / float64(f)), TTL: hold, Now: now,
	})
	if err != nil {
		return err
	}
	if f > 1 {
		g.Share, g.Demand = g.Share*f, g.Demand*f
		g.Burst = min(g.Burst*f, k.rule.Limit.Capacity())
	}
	k.grant, k.period, k.asked, k.renewed, k.every, k.hold = g, k.rule.Limit.Period, int64(d), now, every, hold
	k.weights, k.sum = weights, sum
	return nil
}

// part is b's part of the stream's share of k and of its burst: of the
// share, the part the stream's demand fills in proportion to b's weight,
// and an equal part of the rest; of the burst, as much as of the share.
// A bucket the renewal did not count has none.
func (k *rlqsKey) part(b *rlqsBucket) (share, burst int64) {
	w, ok := k.weights[b]
	if !ok {
		return 0, 0
	}
	g := k.grant
	filled := min(max(g.Share, 0), k.asked)
	if k.sum > 0 {
		share = mulDiv(filled, w, k.sum)
	}
	share += (g.Share - filled) / int64(len(k.weights))
	if g.Share > 0 {
		burst = mulDiv(g.Burst, uint64(share), uint64(g.Share))
	}
	return share, burst
}

// mulDiv is floor(v·w/sum) for v >= 0 and w <= sum, exact in 128 bits.
func mulDiv(v int64, w, sum uint64) int64 {
	if v <= 0 || w == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(v), w)
	q, _ := bits.Div64(hi, lo, sum)
	return int64(q)
}

// assign makes a bucket's assignment from p, and for a token bucket from
// the stream's keys of p's limits (renewed already): the token bucket of
// the key whose part leaves the least, so that the bucket keeps within
// every one. A part of 0 is DENY_ALL, which a token bucket cannot say.
// Its TTL counts from the oldest renewal of those keys, and ends a
// renewal before the authority stops counting any of them.
func assign(b *rlqsBucket, p rlqsPolicy, keys map[string]*rlqsKey, now time.Time) assignment {
	switch p.result {
	case RLQSAllowAll, RLQSShadow:
		return assignment{strategy: blanket(typepb.RateLimitStrategy_ALLOW_ALL), ttl: p.ttl}
	case RLQSDenyAll:
		return assignment{strategy: blanket(typepb.RateLimitStrategy_DENY_ALL), ttl: p.ttl}
	}
	var a assignment
	burst := int64(math.MaxInt64)
	ttl := p.ttl
	for i, l := range p.limits {
		k := keys[l.key]
		share, kb := k.part(b)
		burst = min(burst, kb)
		ttl = min(ttl, p.ttl-now.Sub(k.renewed), k.renewed.Add(k.hold-p.renew).Sub(now))
		// share/period below the one kept so far: compared crosswise,
		// in float64, as both products may pass int64. The period is
		// the one the share was granted for (a reload may change it).
		if i == 0 || float64(share)*float64(a.period) < float64(a.share)*float64(k.period) {
			a.share, a.period, a.holders, a.demand = share, k.period, k.grant.Holders, k.grant.Demand
		}
	}
	a.burst, a.ttl = burst, max(ttl, 0)
	if a.share <= 0 {
		a.strategy = blanket(typepb.RateLimitStrategy_DENY_ALL)
		return a
	}
	a.strategy = tokenBucket(a.share, a.burst, a.period, p.renew)
	return a
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
