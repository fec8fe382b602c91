package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A flood of new keys into the memory store at -max-memory never resets
// a client that spent its limit: with 4 MiB, a client's 100 an hour spent,
// then 100,000 new clients' requests, the first is still denied; the new
// clients are all allowed by the store, which made room by evicting live
// keys, as its metrics say. (Under the race detector, 5,000 new clients
// through 256 KiB: about as many times the store's room, a twentieth of
// the work.)
func TestServeFloodKeepsSpentKey(t *testing.T) {
	maxMemory, fresh := "4MiB", int64(100_000)
	if raceEnabled {
		maxMemory, fresh = "256KiB", 5_000
	}
	// A sliding log: the spent client denies for the hour whenever the
	// test runs, with no window ending in between.
	s := startServe(t, "-max-memory", maxMemory, "-config", writeConfig(t, `domain: shop
descriptors:
  - key: client
    rate_limit:
      algorithm: sliding_log
      unit: hour
      requests_per_unit: 100
`))
	conn, err := grpc.NewClient(s.addr("grpc"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	ask := func(ctx context.Context, client string) (rlspb.RateLimitResponse_Code, error) {
		resp, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "client", Value: client}}},
		}})
		return resp.GetOverallCode(), err
	}
	for i := range 101 {
		want := rlspb.RateLimitResponse_OK
		if i == 100 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if code, err := ask(t.Context(), "spender"); code != want || err != nil {
			t.Fatalf("the spender's request %d: %v, %v; want %v", i+1, code, err, want)
		}
	}

	const workers = 8
	var next, denied atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= fresh; i = next.Add(1) {
				code, err := ask(t.Context(), fmt.Sprintf("client-%06d", i))
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				if code != rlspb.RateLimitResponse_OK {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if n := denied.Load(); n != 0 {
		t.Errorf("%d of %d new clients' first requests denied, want none", n, fresh)
	}
	if code, err := ask(t.Context(), "spender"); code != rlspb.RateLimitResponse_OVER_LIMIT || err != nil {
		t.Errorf("the spender after %d new clients: %v, %v; want OVER_LIMIT", fresh, code, err)
	}

	resp, err := http.Get("http://" + s.addr("http") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	metrics := string(b)
	t.Logf("after the flood:\n%s", grepLines(metrics, "sluice_memory_"))
	for _, want := range []string{`sluice_memory_refusals_total{store="main"} 0`, `sluice_store_errors_total 0`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(metrics, `sluice_memory_evictions_total{kind="live",store="main"} 0`+"\n") ||
		!strings.Contains(metrics, `sluice_memory_evictions_total{kind="live",store="main"}`) {
		t.Errorf("/metrics counts no live eviction:\n%s", grepLines(metrics, "sluice_memory_"))
	}
}

// grepLines is the lines of text that contain s, comments left out.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) && !strings.HasPrefix(line, "#") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
