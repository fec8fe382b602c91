package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testredis"
)

// floodYAML: every rule fails open, as by default. The flood's fresh keys
// are limited per second (so that with -redis-persecond they go to the
// per-second Redis), the attacker's key is 100 an hour, the well-behaved
// client's far from its limit.
const floodYAML = `domain: flood
failure: open
descriptors:
  - key: fresh
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: good
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`

// Flood sizes: floodCallers concurrent callers send floodRequests on
// fresh keys, while the attacker tries its spent key every
// floodAttackEvery and the well-behaved client asks every
// floodGoodEvery.
const (
	floodCallers     = 200
	floodRequests    = 60_000
	floodAttackEvery = 10 * time.Millisecond
	floodGoodEvery   = 10 * time.Millisecond
)

// TestFloodRedis: a flood on fresh keys through a real sluice serve
// process and a real redis-server, from the first request on (the
// script's cold start), never switches a limit off: the attacker's 100
// an hour key is allowed at most 100 times, no request is decided by a
// failure mode, and the circuit breaker never opens. What a well-behaved
// client got meanwhile is reported, not asserted.
func TestFloodRedis(t *testing.T) {
	skipFlood(t)
	testFlood(t, "-redis", "redis://"+testredis.Start(t))
}

// TestFloodRedisPerSecond: the same with the per-second limits in a
// Redis of their own.
func TestFloodRedisPerSecond(t *testing.T) {
	skipFlood(t)
	testFlood(t, "-redis", "redis://"+testredis.Start(t), "-redis-persecond", "redis://"+testredis.Start(t))
}

// TestFloodRedisCluster: the same on a Redis Cluster of three masters.
func TestFloodRedisCluster(t *testing.T) {
	skipFlood(t)
	testFlood(t, "-redis-cluster", strings.Join(testredis.StartCluster(t), ","))
}

func skipFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector slows sluice serve several times: a flood would measure the detector")
	}
	if testing.Short() {
		t.Skip("a flood of 60,000 requests: not in -short")
	}
}

func testFlood(t *testing.T, args ...string) {
	cfg := writeConfig(t, floodYAML)
	c := startChild(t, []string{redisDefaultsEnv + "=1"}, append([]string{"-config", cfg,
		"-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...)...)
	httpAddr, grpcAddr := strings.Fields(c.banner["http"])[0], strings.Fields(c.banner["grpc"])[0]

	// Envoy keeps a few connections to its rate limit service, each
	// carrying many calls at once.
	var clients []rlspb.RateLimitServiceClient
	for range 4 {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, rlspb.NewRateLimitServiceClient(conn))
	}
	var grpcErrs atomic.Int64
	var firstErr atomic.Value
	ask := func(cl rlspb.RateLimitServiceClient, key, value string) (rlspb.RateLimitResponse_Code, bool) {
		req := &rlspb.RateLimitRequest{Domain: "flood", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
		}}
		// A bound of the test's, far above Envoy's: an answer that comes
		// late is still an answer here.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := cl.ShouldRateLimit(ctx, req)
		if err != nil {
			grpcErrs.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return 0, false
		}
		return resp.GetOverallCode(), true
	}

	start := time.Now()
	done := make(chan struct{})
	var attackerOK, attackerTries atomic.Int64
	var good []time.Duration
	var goodOK, goodOver int
	var side sync.WaitGroup
	side.Go(func() {
		tick := time.NewTicker(floodAttackEvery)
		defer tick.Stop()
		for {
			if code, ok := ask(clients[0], "user", "attacker"); ok {
				attackerTries.Add(1)
				if code == rlspb.RateLimitResponse_OK {
					attackerOK.Add(1)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	side.Go(func() {
		tick := time.NewTicker(floodGoodEvery)
		defer tick.Stop()
		for {
			t0 := time.Now()
			code, ok := ask(clients[1], "good", "client")
			if ok {
				good = append(good, time.Since(t0))
				switch code {
				case rlspb.RateLimitResponse_OK:
					goodOK++
				case rlspb.RateLimitResponse_OVER_LIMIT:
					goodOver++ // far from its limit: shed
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	var next atomic.Int64
	var flood sync.WaitGroup
	for i := range floodCallers {
		flood.Go(func() {
			cl := clients[i%len(clients)]
			for n := next.Add(1); n <= floodRequests; n = next.Add(1) {
				ask(cl, "fresh", "f"+strconv.FormatInt(n, 10))
			}
		})
	}
	flood.Wait()
	took := time.Since(start)
	close(done)
	side.Wait()

	failed := metricSum(t, httpAddr, "sluice_store_errors_total")
	opens := metricSum(t, httpAddr, "sluice_store_breaker_opens_total")
	shed := metricSum(t, httpAddr, "sluice_shed_total")
	slices.Sort(good)
	var p99 time.Duration
	if len(good) > 0 {
		p99 = good[len(good)*99/100]
	}
	t.Logf("%d requests from %d callers in %v (%.0f/s); shed %v; decided by a failure mode %v; breaker opened %v times",
		floodRequests, floodCallers, took.Round(time.Millisecond), float64(floodRequests)/took.Seconds(), shed, failed, opens)
	if n := len(good); n > 0 {
		t.Logf("well-behaved client: %d requests, %.1f%% allowed, %.1f%% shed, p99 %v",
			n, 100*float64(goodOK)/float64(n), 100*float64(goodOver)/float64(n), p99.Round(10*time.Microsecond))
	}
	t.Logf("attacker: %d of %d tries allowed", attackerOK.Load(), attackerTries.Load())

	if n := grpcErrs.Load(); n != 0 {
		t.Errorf("%d calls ended in a gRPC error (the first: %v): Envoy's default failure_mode_deny: false allows each", n, firstErr.Load())
	}
	if n := attackerOK.Load(); n > 100 {
		t.Errorf("the attacker's 100 an hour key was allowed %d times", n)
	}
	if failed != 0 {
		t.Errorf("%v requests were decided by their rules' failure modes (open: allowed)", failed)
	}
	if opens != 0 {
		t.Errorf("the circuit breaker opened %v times under load alone", opens)
	}
	if t.Failed() {
		t.Logf("sluice serve's log:\n%s", lastLines(c.log(), 40))
	}
}

// metricSum is the sum of the samples of metric name on the service's
// /metrics, labels whatever they are; 0 if there is none.
func metricSum(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprint(strings.Join(lines, "\n"))
}
