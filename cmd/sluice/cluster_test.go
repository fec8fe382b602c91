package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
)

const clusterYAML = `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: plan
    rate_limits:
      - name: plan_hourly
        unit: hour
        requests_per_unit: 3
      - name: plan_daily
        unit: day
        requests_per_unit: 2
`

// sluice serve -redis-cluster on a real 3-master cluster: requests whose
// checks share one key (one descriptor, or several limits of one
// descriptor), each decided in one script run on the node of its slot,
// and requests with descriptors on keys in different slots, decided a
// part per slot and given back when denied (see the README).
func TestServeCluster(t *testing.T) {
	addrs := testredis.StartCluster(t)
	s := startServe(t, "-config", writeConfig(t, clusterYAML), "-redis-cluster", strings.Join(addrs, ","))
	if want := "redis cluster " + strings.Join(addrs, ","); s.banner["store"] != want {
		t.Errorf("banner store %q, want %q", s.banner["store"], want)
	}
	warmUp(t, s)
	stableWindow(time.Hour, 20*time.Second)
	run := fmt.Sprint(time.Now().UnixNano())
	errs := storeErrors(t, s)
	defer func() {
		if n := storeErrors(t, s); n != errs {
			t.Errorf("%v store errors (Redis calls past their deadline fail open): the decisions above were not all Redis's", n-errs)
		}
	}()
	var wg sync.WaitGroup
	for u := range 30 {
		wg.Go(func() {
			for i, want := range []int{200, 200, 429} {
				if code, body := s.postJSON(t, "shop", "user", fmt.Sprintf("u%d-%s", u, run)); code != want {
					t.Errorf("user %d request %d: %d %s, want %d", u, i+1, code, body, want)
				}
			}
		})
	}
	wg.Wait()
	// Two limits of one descriptor, one key: all-or-nothing on its node.
	// plan_daily allows 2; plan_hourly is not charged by the denial.
	for i, want := range []int{200, 200, 429, 429} {
		if code, body := s.postJSON(t, "shop", "plan", "p"+run); code != want {
			t.Errorf("plan request %d: %d %s, want %d", i+1, code, body, want)
		} else if i == 3 && !strings.Contains(body, `\"plan_hourly\";r=1;`) {
			t.Errorf("plan request 4: %s; want plan_hourly charged by the two allowed only, 1 left", body)
		}
	}

	// The keys are spread over the three masters.
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	var mu sync.Mutex
	per := map[string]int{}
	err := cc.ForEachMaster(t.Context(), func(ctx context.Context, n *goredis.Client) error {
		keys, err := n.Keys(ctx, "sluice:*").Result()
		mu.Lock()
		per[n.Options().Addr] = len(keys)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if per[a] == 0 {
			t.Errorf("no key on master %s: %v", a, per)
		}
	}

	// Two descriptors on two keys, in two slots: decided a part per slot.
	// Allowed, both are charged; denied by one, the other is given back.
	two := func(a, b string) int {
		t.Helper()
		body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":%q}]},{"entries":[{"key":"user","value":%q}]}]}`, a, b)
		resp, err := http.Post("http://"+s.addr("http")+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	x, y := "x"+run, "y"+run
	for i, want := range []int{200, 200, 429} {
		if code := two(x, y); code != want {
			t.Errorf("two keys, request %d: %d, want %d", i+1, code, want)
		}
	}
	a, b := "a"+run, "b"+run
	for range 2 {
		s.postJSON(t, "shop", "user", b)
	}
	if code := two(a, b); code != 429 {
		t.Errorf("two keys, the second exhausted: %d, want 429", code)
	}
	for i, want := range []int{200, 200, 429} {
		if code, body := s.postJSON(t, "shop", "user", a); code != want {
			t.Errorf("the first key after the denied request, request %d: %d %s, want %d (given back)", i+1, code, body, want)
		}
	}
}

// REDIS_TYPE=cluster and REDIS_URL, envoyproxy/ratelimit's variables,
// name the same cluster.
func TestServeClusterFromEnv(t *testing.T) {
	addrs := testredis.StartCluster(t)
	withEnv(t, "REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "cluster", "REDIS_URL", strings.Join(addrs, ","), "USE_STATSD", "false")
	s := startServe(t, "-config", writeConfig(t, clusterYAML))
	if want := "redis cluster " + strings.Join(addrs, ","); s.banner["store"] != want {
		t.Errorf("banner store %q, want %q", s.banner["store"], want)
	}
	warmUp(t, s)
	user := fmt.Sprint("env", time.Now().UnixNano())
	stableWindow(time.Hour, 10*time.Second)
	for i, want := range []int{200, 200, 429} {
		if code, body := s.postJSON(t, "shop", "user", user); code != want {
			t.Errorf("request %d: %d %s, want %d", i+1, code, body, want)
		}
	}
}

// storeErrors reads sluice_store_errors_total from /metrics.
func storeErrors(t *testing.T, s *serving) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.addr("http") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "sluice_store_errors_total "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}

// warmUp sends requests on keys of their own until ten in a row reach
// Redis without an error: the first calls to a cluster dial every node,
// learn the slots and load the script, and may pass the store's deadline
// (10s in these tests, 50ms by default), failing open, which the test
// would take for a wrong count.
func warmUp(t *testing.T, s *serving) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		before := storeErrors(t, s)
		for k := range 10 {
			s.postJSON(t, "shop", "user", fmt.Sprintf("warm-%d-%d", i, k))
		}
		if storeErrors(t, s) == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis calls still fail after 30s of warm-up")
		}
	}
}
