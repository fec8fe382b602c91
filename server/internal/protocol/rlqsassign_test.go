package protocol

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
)

func TestTokenBucket(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		share, burst  int64
		period, renew time.Duration
		max, fill     uint32
		interval      time.Duration
	}{
		{100, 200, time.Second, 100 * ms, 2, 1, 10 * ms},
		{10000, 10000, time.Second, 100 * ms, 200, 100, 10 * ms},
		{1250, 1250, time.Second, 100 * ms, 24, 12, 9600 * time.Microsecond},
		{100, 0, time.Second, 100 * ms, 1, 1, 10 * ms}, // Envoy requires max_tokens > 0
		{3, 3, time.Second, 100 * ms, 2, 1, 333333334},
		{3600, 3600, time.Hour, 10 * time.Second, 2, 1, time.Second},
		{1 << 33, 1 << 33, time.Second, 100 * ms, 171798690, 85899345, 10 * ms},
	}
	for _, tt := range tests {
		tb := tokenBucket(tt.share, tt.burst, tt.period, tt.renew).GetTokenBucket()
		if tb.GetMaxTokens() != tt.max || tb.GetTokensPerFill().GetValue() != tt.fill || tb.GetFillInterval().AsDuration() != tt.interval {
			t.Errorf("tokenBucket(%d, %d, %v, %v) = %d per %v, max %d; want %d per %v, max %d", tt.share, tt.burst, tt.period, tt.renew,
				tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens(), tt.fill, tt.interval, tt.max)
		}
		rate := float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		if share := float64(tt.share) / tt.period.Seconds(); rate > share || rate < share*0.999 {
			t.Errorf("tokenBucket(%d, %d, %v, %v) refills %v a second, want the share's %v, not more", tt.share, tt.burst, tt.period, tt.renew, rate, share)
		}
	}
}

// A rule's times are its Lease's (sluice.Lease.Times), the TTL cut so
// that it and a renewal, which the authority keeps a share for, fit in
// the authorities' longest TTL.
func TestShareTimes(t *testing.T) {
	tests := []struct {
		period, renew, ttl time.Duration
		wantRenew, wantTTL time.Duration
	}{
		{time.Second, 0, 0, 100 * time.Millisecond, 300 * time.Millisecond},
		{100 * time.Millisecond, 0, 0, 50 * time.Millisecond, 150 * time.Millisecond},
		{time.Hour, 0, 0, 10 * time.Second, 30 * time.Second},
		{time.Minute, time.Second, 5 * time.Second, time.Second, 5 * time.Second},
		{time.Minute, 2 * time.Second, 0, 2 * time.Second, 6 * time.Second},
		{10 * time.Millisecond, 0, 0, 10 * time.Millisecond, 30 * time.Millisecond},           // no longer than the period
		{time.Minute, 0, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}, // nor the TTL
		{48 * time.Hour, time.Hour, 168 * time.Hour, time.Hour, 167 * time.Hour},
	}
	for _, tt := range tests {
		r := rule(tt.period, tt.renew, tt.ttl)
		if renew, ttl := shareTimes(r); renew != tt.wantRenew || ttl != tt.wantTTL {
			t.Errorf("shareTimes(period %v, renew %v, ttl %v) = %v, %v; want %v, %v", tt.period, tt.renew, tt.ttl, renew, ttl, tt.wantRenew, tt.wantTTL)
		}
	}
}

func rule(period, renew, ttl time.Duration) sluice.Rule {
	return sluice.Rule{Name: "r", Limit: sluice.Limit{Rate: 10, Period: period}, Lease: sluice.Lease{Renew: renew, TTL: ttl}}
}

// A limit past what the authorities divide exactly is divided in units of
// several requests, rounded down, and its burst cut: what the authority
// is asked is always within sluice.MaxLeaseQuota, and the shares it can
// grant, multiplied back, never sum past the rate.
func TestLeaseLimit(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		in   sluice.Limit
		want sluice.Limit
		k    int64
	}{
		{sluice.Limit{Rate: 100, Period: time.Second}, sluice.Limit{Rate: 100, Period: time.Second}, 1},
		{sluice.Limit{Rate: 100, Period: time.Second, Burst: 1 << 30}, sluice.Limit{Rate: 100, Period: time.Second, Burst: sluice.MaxLeaseQuota}, 1},
		{sluice.Limit{Rate: 50_000_000, Period: day}, sluice.Limit{Rate: 25_000_000, Period: day}, 2},
		{sluice.Limit{Rate: 50_000_001, Period: day, Burst: 7}, sluice.Limit{Rate: 25_000_000, Period: day, Burst: 3}, 2},
		{sluice.Limit{Rate: 1 << 40, Period: day, Burst: 1 << 50}, sluice.Limit{Rate: 1 << 25, Period: day, Burst: sluice.MaxLeaseQuota}, 1 << 15},
	}
	for _, tt := range tests {
		got, k := leaseLimit(tt.in)
		if got != tt.want || k != tt.k {
			t.Errorf("leaseLimit(%v) = %v, %d; want %v, %d", tt.in, got, k, tt.want, tt.k)
		}
		if got.Rate*k > tt.in.Rate || got.Rate > sluice.MaxLeaseQuota || got.Capacity() > sluice.MaxLeaseQuota {
			t.Errorf("leaseLimit(%v) = %v, %d: past the rate or the authorities' bound", tt.in, got, k)
		}
	}
}

// A rule of 50,000,000 a day, past what a lease divides exactly, is
// assigned a token bucket at its rate, to a stream that asks more.
func TestAssignLargeRate(t *testing.T) {
	r := sluice.Rule{Name: "big", Limit: sluice.Limit{Rate: 50_000_000, Period: 24 * time.Hour}}
	renew, ttl := shareTimes(r)
	p := rlqsPolicy{result: RLQSAssigned, renew: renew, ttl: ttl, limits: []rlqsLimit{{key: "rlqs:big", rule: r}}}
	b := &rlqsBucket{policy: p, rate: 1000, held: []string{"rlqs:big"}} // over the limit: it all
	k := &rlqsKey{key: "rlqs:big", rule: r, buckets: map[*rlqsBucket]struct{}{b: {}}}
	now := time.Unix(0, 0)
	if err := renewKey(t.Context(), lease.NewMemoryAuthority(), "h", k, now); err != nil {
		t.Fatal(err)
	}
	as := assign(b, p, map[string]*rlqsKey{k.key: k}, now)
	if as.share != 50_000_000 || as.period != 24*time.Hour || as.strategy.GetTokenBucket() == nil {
		t.Errorf("assign = share %d per %v (%v), want the token bucket of 50000000 per 24h", as.share, as.period, as.strategy)
	}
}

// A stream's buckets on one key divide its share: what the stream's
// demand fills by each bucket's demand, the rest equally, so an idle
// bucket beside a busy one still has a part; the parts never sum past
// the share, however many buckets and whatever their demand.
func TestKeyParts(t *testing.T) {
	r := sluice.Rule{Name: "k", Limit: sluice.Limit{Rate: 1000, Period: time.Second}}
	now := time.Unix(0, 0)
	for _, rates := range [][]float64{
		{0, 200},          // an idle bucket beside a busy one
		{0, 0, 0},         // none asks: equal parts
		{5000, 1},         // past the limit: by demand
		{1e300, 1e300, 3}, // past any bound on weights
		{1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5},
	} {
		k := &rlqsKey{key: "rlqs:k", rule: r, buckets: map[*rlqsBucket]struct{}{}}
		var bs []*rlqsBucket
		for _, rate := range rates {
			b := &rlqsBucket{policy: rlqsPolicy{result: RLQSAssigned, renew: 100 * time.Millisecond, ttl: 300 * time.Millisecond}, rate: rate}
			k.buckets[b] = struct{}{}
			bs = append(bs, b)
		}
		if err := renewKey(t.Context(), lease.NewMemoryAuthority(), "h", k, now); err != nil {
			t.Fatal(err)
		}
		var shares, bursts int64
		parts := make([]int64, len(bs))
		for i, b := range bs {
			s, bu := k.part(b)
			parts[i] = s
			shares += s
			bursts += bu
		}
		if shares > k.grant.Share || bursts > k.grant.Burst {
			t.Errorf("rates %v: parts %v sum to %d of share %d, bursts to %d of %d", rates, parts, shares, k.grant.Share, bursts, k.grant.Burst)
		}
		if rates[0] == 0 && parts[0] == 0 {
			t.Errorf("rates %v: parts %v of share %d: the idle bucket has none", rates, parts, k.grant.Share)
		}
		if k.grant.Share-shares > 2*int64(len(bs)) { // two floors a part
			t.Errorf("rates %v: parts %v sum to %d, share %d: more than rounding left over", rates, parts, shares, k.grant.Share)
		}
	}
}
