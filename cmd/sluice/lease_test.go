package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testredis"
)

// leaseYAML leases a token bucket of leaseRate a second, burst
// leaseRate, which fails closed: a request the lease did not decide is
// denied. A team's leases live a minute without renewal.
const (
	leaseRate = 200
	leaseYAML = `domain: shop
descriptors:
  - key: user
    rate_limit:
      algorithm: token_bucket
      unit: second
      requests_per_unit: 200
      failure: closed
      lease: {renew: 100ms, ttl: 3s}
  - key: team
    rate_limit:
      unit: second
      requests_per_unit: 200
      lease: {renew: 1s, ttl: 1m}
`
)

// leaseReplicas starts n sluice serve processes on one redis-server, with
// leaseYAML, and returns their HTTP addresses and the redis-server.
func leaseReplicas(t *testing.T, n int) ([]*child, *redisProc) {
	t.Helper()
	rp := startRedisProc(t, "redis-server")
	return leaseServers(t, n, "-redis", "redis://"+rp.addr), rp
}

// leaseServers starts n sluice serve processes with leaseYAML, on the
// Redis that args name.
func leaseServers(t *testing.T, n int, args ...string) []*child {
	t.Helper()
	cfg := writeConfig(t, leaseYAML)
	var cs []*child
	for range n {
		cs = append(cs, startChild(t, nil, append([]string{"-config", cfg,
			"-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-key-lookup"}, args...)...))
	}
	return cs
}

func httpAddr(c *child) string  { return strings.Fields(c.banner["http"])[0] }
func adminAddr(c *child) string { return strings.Fields(c.banner["admin"])[0] }
func grpcAddr(c *child) string  { return strings.Fields(c.banner["grpc"])[0] }

// postShop posts one request for user to c and returns its status.
func postShop(t *testing.T, client *http.Client, c *child, user string) int {
	t.Helper()
	return postShopKey(t, client, c, "user", user)
}

// postShopKey posts one request for key=value to c and returns its
// status.
func postShopKey(t *testing.T, client *http.Client, c *child, key, value string) int {
	t.Helper()
	body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, key, value)
	resp, err := client.Post("http://"+httpAddr(c)+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// hammer sends requests for key=value through each replica, from
// perReplica callers each, for about d, and returns what each replica
// admitted and how long it took, from before the first request to after
// the last answer.
func hammer(t *testing.T, client *http.Client, cs []*child, key, value string, d time.Duration) ([]int, time.Duration) {
	t.Helper()
	const perReplica = 4
	var (
		mu      sync.Mutex
		allowed = make([]int, len(cs))
		other   = map[int]int{}
		wg      sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(d)
	for i, c := range cs {
		for range perReplica {
			wg.Go(func() {
				for time.Now().Before(stop) {
					code := postShopKey(t, client, c, key, value)
					mu.Lock()
					switch code {
					case http.StatusOK:
						allowed[i]++
					case http.StatusTooManyRequests:
					default:
						other[code]++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(other) > 0 {
		t.Errorf("%s=%s: answers other than 200 and 429: %v", key, value, other)
	}
	return allowed, time.Since(start)
}

// Two sluice serve replicas on one redis-server, hammered on one leased
// key through both: together they admit no more than an exact limit may
// over the time they were asked (a token bucket: burst + rate × elapsed;
// a fixed window: the rate in each window the time touched); each admits
// some; and the console of each shows the key's lease with both
// holders. The elapsed time is the test's own, from before the first
// request to after the last answer, which only loosens the bound on a
// slow machine.
func TestServeLeaseReplicas(t *testing.T) {
	cs, _ := leaseReplicas(t, 2)
	testLeaseReplicas(t, cs)
}

// TestServeLeaseCluster: the same on a Redis Cluster of three masters.
func TestServeLeaseCluster(t *testing.T) {
	testLeaseReplicas(t, leaseServers(t, 2, "-redis-cluster", strings.Join(testredis.StartCluster(t), ",")))
}

func testLeaseReplicas(t *testing.T, cs []*child) {
	user := fmt.Sprint("u", time.Now().UnixNano())
	client := &http.Client{Timeout: 30 * time.Second}
	for _, tt := range []struct {
		key, value string
		bound      func(elapsed time.Duration) int
	}{
		{"user", user, func(e time.Duration) int { return leaseRate + int(float64(leaseRate)*e.Seconds()) }},
		{"team", user, func(e time.Duration) int { return leaseRate * (int(e/time.Second) + 2) }},
	} {
		allowed, elapsed := hammer(t, client, cs, tt.key, tt.value, 3*time.Second)
		total, bound := allowed[0]+allowed[1], tt.bound(elapsed)
		t.Logf("%s: admitted %v in %v: %d of a bound of %d", tt.key, allowed, elapsed, total, bound)
		if total > bound {
			t.Errorf("%s: the replicas admitted %d (%v) in %v, above the bound %d", tt.key, total, allowed, elapsed, bound)
		}
		if allowed[0] == 0 || allowed[1] == 0 {
			t.Errorf("%s: admitted %v: want each replica to admit on its share", tt.key, allowed)
		}
	}

	// Each console shows the team's lease (the last hammered, and one
	// that lives a minute unrenewed), held by both replicas.
	for i, c := range cs {
		r := leasesOf(t, client, c)
		k := slices.IndexFunc(r.Keys, func(k leaseKeyReport) bool { return k.Key == "shop|team="+user })
		if !r.Leasing || r.Holder == "" || len(r.Keys) != 2 || k < 0 || r.Keys[k].Error != "" {
			t.Errorf("replica %d: /v1/leases = %+v, want the leases of user and team %s", i, r, user)
			continue
		}
		var self, shares int64
		for _, h := range r.Keys[k].Holders {
			if h.Self {
				self++
			}
			shares += h.Share
		}
		if self != 1 || len(r.Keys[k].Holders) != 2 || shares > leaseRate {
			t.Errorf("replica %d: holders %+v: want both replicas, this process once, the shares at most %d", i, r.Keys[k].Holders, leaseRate)
		}
	}
}

// leasesReport is GET /v1/leases, as the tests read it.
type leasesReport struct {
	Leasing bool             `json:"leasing"`
	Holder  string           `json:"holder"`
	Keys    []leaseKeyReport `json:"keys"`
}

type leaseKeyReport struct {
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	Holders []struct {
		Holder string `json:"holder"`
		Self   bool   `json:"self"`
		Share  int64  `json:"share"`
	} `json:"holders"`
	Error string `json:"error"`
}

// leasesOf reads c's GET /v1/leases.
func leasesOf(t *testing.T, client *http.Client, c *child) leasesReport {
	t.Helper()
	var r leasesReport
	resp, err := client.Get("http://" + adminAddr(c) + "/v1/leases")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("/v1/leases: %v", err)
	}
	return r
}

// A replica stopped (SIGTERM) gives its leases back: the other finds
// itself the key's only holder at Redis long before the stopped one's
// lease would have lapsed (a minute).
func TestServeLeaseReleasedAtStop(t *testing.T) {
	cs, _ := leaseReplicas(t, 2)
	client := &http.Client{Timeout: 30 * time.Second}
	team := fmt.Sprint("t", time.Now().UnixNano())
	holders := func(c *child) int {
		r := leasesOf(t, client, c)
		for _, k := range r.Keys {
			if strings.Contains(k.Key, team) {
				return len(k.Holders)
			}
		}
		return 0
	}
	for i, c := range cs {
		waitFor(t, 30*time.Second, fmt.Sprintf("replica %d allowed on a lease", i), func() bool {
			return postShopKey(t, client, c, "team", team) == http.StatusOK
		})
	}
	waitFor(t, 30*time.Second, "both replicas holding the team's key", func() bool { return holders(cs[1]) == 2 })
	cs[0].stop(t)
	waitFor(t, 30*time.Second, "the stopped replica's lease given back", func() bool { return holders(cs[1]) == 1 })
}

// A sluice serve replica whose Redis stops answering while it holds a
// lease decides on the lease until it expires, then by the rule's failure
// mode (closed: denied, counted as a store error); when Redis answers
// again, it leases again.
func TestServeLeaseRedisStopped(t *testing.T) {
	cs, rp := leaseReplicas(t, 1)
	c := cs[0]
	client := &http.Client{Timeout: 60 * time.Second}
	user := fmt.Sprint("u", time.Now().UnixNano())
	waitFor(t, 30*time.Second, "a request allowed on a lease", func() bool {
		return postShop(t, client, c, user) == http.StatusOK
	})
	errs := metricSum(t, httpAddr(c), "sluice_store_errors_total")

	rp.signal(t, syscall.SIGSTOP)
	defer rp.signal(t, syscall.SIGCONT)
	// The rule fails closed: a request allowed now was decided on the
	// lease.
	waitFor(t, 30*time.Second, "a request allowed on the lease with Redis stopped", func() bool {
		return postShop(t, client, c, user) == http.StatusOK
	})
	if n := metricSum(t, httpAddr(c), "sluice_store_errors_total"); n != errs {
		t.Errorf("sluice_store_errors_total went from %v to %v while the lease held", errs, n)
	}
	waitFor(t, 60*time.Second, "the failure mode deciding once the lease expired", func() bool {
		return postShop(t, client, c, user) == http.StatusTooManyRequests &&
			metricSum(t, httpAddr(c), "sluice_store_errors_total") > errs
	})

	rp.signal(t, syscall.SIGCONT)
	waitFor(t, 60*time.Second, "a request allowed on a new lease once Redis answers", func() bool {
		return postShop(t, client, c, user) == http.StatusOK
	})
	if t.Failed() {
		t.Logf("sluice serve's log:\n%s", lastLines(c.log(), 40))
	}
}
