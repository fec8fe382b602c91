package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
)

// pairRLS decides each descriptor as the inexact peers do (envoyproxy/
// ratelimit's fixed window): INCRBY of the window's counter by the hits
// and PEXPIRE to the window's end, the two pipelined in one round trip
// per request, denied requests counted too. run.sh reads redis-server's
// command time per request under it beside sluice's, in the same run:
// what the inexact peers make Redis pay.
type pairRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	rc    *goredis.Client
	limit int64
}

// pairWindow is the pair's window, as bench.yaml's unit.
const pairWindow = time.Second

func (s pairRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	hits := int64(max(req.GetHitsAddend(), 1))
	start := time.Now().Truncate(pairWindow)
	ttl := pairWindow - time.Since(start) + time.Second // slack, as envoyproxy/ratelimit's
	pipe := s.rc.Pipeline()
	incrs := make([]*goredis.IntCmd, len(req.GetDescriptors()))
	var k strings.Builder
	for i, d := range req.GetDescriptors() {
		k.Reset()
		k.WriteString(req.GetDomain())
		for _, e := range d.GetEntries() {
			k.WriteByte('_')
			k.WriteString(e.GetKey())
			k.WriteByte('_')
			k.WriteString(e.GetValue())
		}
		k.WriteByte('_')
		k.WriteString(strconv.FormatInt(start.Unix(), 10))
		key := k.String()
		incrs[i] = pipe.IncrBy(ctx, key, hits)
		pipe.PExpire(ctx, key, ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	resp.Statuses = make([]*rlspb.RateLimitResponse_DescriptorStatus, len(incrs))
	for i, c := range incrs {
		code := rlspb.RateLimitResponse_OK
		if c.Val() > s.limit {
			code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = code
		}
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: code}
	}
	return resp, nil
}

// pairGRPC serves pairRLS on addr (and POST /json on httpAddr, if not
// empty), on the Redis at url.
func pairGRPC(ctx context.Context, addr, httpAddr, url string) error {
	rc, err := redisClient(url)
	if err != nil {
		return err
	}
	defer rc.Close()
	return serveRLS(ctx, addr, httpAddr, pairRLS{rc: rc, limit: 100})
}

// redisClient is a client of the Redis at url, which must be on loopback,
// set as sluice serve's is.
func redisClient(url string) (*goredis.Client, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if err := loopback(opts.Addr); err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	opts.MaxRetries = -1 // as sluice serve's client
	opts.ContextTimeoutEnabled = true
	return goredis.NewClient(opts), nil
}
