package main

import (
	"context"
	"sync"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/internal/testredis"
)

// floorServer is a floorRLS on a redis-server of the test's own, its runs
// going until the test ends.
func floorServer(t *testing.T) *floorRLS {
	t.Helper()
	rc := goredis.NewClient(&goredis.Options{Addr: testredis.Start(t)})
	t.Cleanup(func() { rc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := rc.FunctionLoadReplace(ctx, bench.FloorLibrary).Err(); err != nil {
		t.Skipf("FUNCTION LOAD: %v (Redis before 7)", err)
	}
	s := &floorRLS{rc: rc, queue: make(chan *floorCall, 1024)}
	go s.runs(ctx)
	return s
}

// The floor decides exactly however its requests are batched: 150
// requests for one key from 32 goroutines, 100 allowed (bench.yaml's
// rate), counted as the replies say.
func TestFloorRunsExact(t *testing.T) {
	s := floorServer(t)
	const callers, calls = 32, 150
	var mu sync.Mutex
	allowed, denied := 0, 0
	var wg sync.WaitGroup
	next := make(chan struct{}, calls)
	for range calls {
		next <- struct{}{}
	}
	close(next)
	for range callers {
		wg.Go(func() {
			for range next {
				c := &floorCall{key: "one_window", done: make(chan struct{})}
				s.queue <- c
				<-c.done
				mu.Lock()
				switch {
				case c.err != nil:
					t.Error(c.err)
				case c.reply%2 == 1:
					allowed++
				default:
					denied++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 100 || denied != calls-100 {
		t.Fatalf("allowed %d, denied %d of %d; want 100 and %d", allowed, denied, calls, calls-100)
	}
}

// ShouldRateLimit answers OK for a user's first request, and refuses a
// request with no descriptor.
func TestFloorShouldRateLimit(t *testing.T) {
	s := floorServer(t)
	ctx := context.Background()
	resp, err := s.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
		t.Fatalf("got %v, want OK with one status", resp)
	}
	if _, err := s.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench"}); err == nil {
		t.Fatal("a request with no descriptor was answered")
	}
}
