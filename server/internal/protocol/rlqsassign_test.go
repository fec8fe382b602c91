package protocol

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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

func TestLeaseTimes(t *testing.T) {
	tests := []struct {
		period, renew, ttl time.Duration
		wantRenew, wantTTL time.Duration
	}{
		{time.Second, 0, 0, 100 * time.Millisecond, 300 * time.Millisecond},
		{100 * time.Millisecond, 0, 0, 50 * time.Millisecond, 150 * time.Millisecond},
		{time.Hour, 0, 0, 10 * time.Second, 30 * time.Second},
		{time.Minute, time.Second, 5 * time.Second, time.Second, 5 * time.Second},
		{time.Minute, 2 * time.Second, 0, 2 * time.Second, 6 * time.Second},
	}
	for _, tt := range tests {
		r := rule(tt.period, tt.renew, tt.ttl)
		if renew, ttl := leaseTimes(r); renew != tt.wantRenew || ttl != tt.wantTTL {
			t.Errorf("leaseTimes(period %v, renew %v, ttl %v) = %v, %v; want %v, %v", tt.period, tt.renew, tt.ttl, renew, ttl, tt.wantRenew, tt.wantTTL)
		}
	}
}

func rule(period, renew, ttl time.Duration) sluice.Rule {
	return sluice.Rule{Name: "r", Limit: sluice.Limit{Rate: 10, Period: period}, Lease: sluice.Lease{Renew: renew, TTL: ttl}}
}
