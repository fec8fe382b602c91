package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/internal/testredis"
)

// floorServer is a floorRLS on a redis-server of the test's own.
func floorServer(t *testing.T) *floorRLS {
	t.Helper()
	rc := goredis.NewClient(&goredis.Options{Addr: testredis.Start(t)})
	t.Cleanup(func() { rc.Close() })
	if err := rc.FunctionLoadReplace(context.Background(), bench.FloorLibrary).Err(); err != nil {
		t.Skipf("FUNCTION LOAD: %v (Redis before 7)", err)
	}
	return newFloorRLS(rc)
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
				c := &floorCall{key: "one_window"}
				s.decide(c)
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

// The floor takes turns as the store's batcher does. The first caller
// sends a run of its own; 70 callers queue behind it, in order; when it
// comes back, the oldest waiter sends the next 64 in one run, and the
// oldest of the rest the last 6. Each caller gets its own reply.
func TestFloorTakesTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs [][]string // each run's request keys
		release := make(chan struct{})
		s := &floorRLS{send: func(keys []string) ([]int64, error) {
			runs = append(runs, keys[1:])
			<-release // the run is out until the test lets it back
			vals := make([]int64, len(keys))
			for i, k := range keys[1:] {
				n, _ := strconv.Atoi(strings.TrimPrefix(k, "user"))
				vals[i+1] = int64(n)*2 + 1
			}
			return vals, nil
		}}
		const n = 71
		calls := make([]*floorCall, n)
		var wg sync.WaitGroup
		for i := range calls {
			calls[i] = &floorCall{key: fmt.Sprintf("user%d", i)}
			wg.Go(func() { s.decide(calls[i]) })
			synctest.Wait() // sent or queued, in turn
		}
		for r, want := range [][2]int{{0, 1}, {1, 65}, {65, 71}} {
			if len(runs) != r+1 {
				t.Fatalf("%d runs sent before run %d came back, want %d", len(runs), r, r+1)
			}
			var keys []string
			for i := want[0]; i < want[1]; i++ {
				keys = append(keys, calls[i].key)
			}
			if !slices.Equal(runs[r], keys) {
				t.Errorf("run %d: %v, want %v", r, runs[r], keys)
			}
			release <- struct{}{}
			synctest.Wait()
		}
		wg.Wait()
		for i, c := range calls {
			if c.err != nil || c.reply != int64(i)*2+1 {
				t.Errorf("request %d: reply %d, err %v; want %d", i, c.reply, c.err, i*2+1)
			}
		}
		if len(runs) != 3 || s.out || len(s.queue) != 0 {
			t.Errorf("after: %d runs, out %v, %d queued; want 3 runs, none out, none queued", len(runs), s.out, len(s.queue))
		}
	})
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

// POST /json on the floor answers as sluice serve's does: 200 while the
// user is under bench.yaml's 100 a second, 429 past it, 400 for a body
// that is not a RateLimitRequest, 405 for another method.
func TestFloorJSON(t *testing.T) {
	srv := httptest.NewServer(jsonHandler(floorServer(t)))
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// 101 requests for one user in one second (the floor's window), tried
	// again for another user when they straddle two
	counted := false
	for try := 0; try < 5 && !counted; try++ {
		req := fmt.Sprintf(`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"json%d"}]}]}`, try)
		codes := map[int]int{}
		start := time.Now().Unix()
		for range 101 {
			code, body := post(req)
			codes[code]++
			if code == http.StatusOK && !strings.Contains(body, `"overallCode":"OK"`) {
				t.Fatalf("200 with %s", body)
			}
		}
		if time.Now().Unix() != start {
			continue
		}
		counted = true
		if codes[http.StatusOK] != 100 || codes[http.StatusTooManyRequests] != 1 {
			t.Fatalf("answers %v, want 100 × 200 and one 429", codes)
		}
	}
	if !counted {
		t.Fatal("no 101 requests fit in one second in 5 tries")
	}
	for _, bad := range []string{"", "{", `{"domain":1}`, strings.Repeat("[", 10000)} {
		if code, _ := post(bad); code != http.StatusBadRequest {
			t.Errorf("%.20q: %d, want 400", bad, code)
		}
	}
	resp, err := http.Get(srv.URL + "/json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d, want 405", resp.StatusCode)
	}
}

// -http, as -addr, must be a loopback address: the tool sends load.
func TestHTTPAddrLoopbackOnly(t *testing.T) {
	for _, a := range []string{"0.0.0.0:9999", "10.1.2.3:9999", ":9999"} {
		var out strings.Builder
		if code := run(context.Background(), []string{"pair-grpc", "-addr", "127.0.0.1:0", "-http", a}, &out, &out); code != 2 {
			t.Errorf("-http %s: exit %d, want 2 (%s)", a, code, out.String())
		}
	}
}
