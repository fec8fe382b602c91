package redis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/storetest"
)

// TestCluster runs on a 3-master Redis Cluster: keys spread over the
// masters, each decided right; a hash tag joins a request's keys in one
// slot, and one run (TestClusterSplit decides them apart).
func TestCluster(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	p := prefix(t)
	s := newStore(t, cc, redis.WithPrefix(p))
	ctx := context.Background()
	rules := []*sluice.PreparedRule{
		prep(sluice.Rule{Name: "gcra", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(3)}),
		prep(sluice.Rule{Name: "log", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerDay(3)}),
		prep(sluice.Rule{Name: "fixed", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 3, Period: 1000 * time.Hour}}),
	}
	var wg sync.WaitGroup
	for k := range 60 {
		wg.Go(func() {
			checks := make([]sluice.Check, len(rules))
			for i, r := range rules {
				checks[i] = sluice.Check{Rule: r, Key: fmt.Sprint("user", k)}
			}
			out := make([]sluice.Decision, len(checks))
			for i := range 4 {
				if err := s.Take(ctx, time.Time{}, checks, out); err != nil {
					t.Errorf("key %d take %d: %v", k, i, err)
					return
				}
				for j, d := range out {
					if d.Allowed != (i < 3) || d.Remaining != int64(max(2-i, 0)) {
						t.Errorf("key %d take %d check %s = %+v", k, i, rules[j].Name(), d)
					}
				}
			}
		})
	}
	wg.Wait()
	per := map[string]int{}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		keys, err := n.Keys(ctx, p+"*").Result()
		mu.Lock()
		per[n.Options().Addr] = len(keys)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(per) != 3 {
		t.Fatalf("keys on %d masters: %v", len(per), per)
	}
	for a, n := range per {
		if n == 0 {
			t.Errorf("no key on master %s: %v", a, per)
		}
	}

	ip := prep(sluice.Rule{Name: "ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	user := prep(sluice.Rule{Name: "user", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	two := []sluice.Check{{Rule: ip, Key: "203.0.113.7"}, {Rule: user, Key: "bob"}}
	tagged := newStore(t, cc, redis.WithPrefix(p), redis.WithHashTag(func(c sluice.Check) string { return "bob" }))
	out := make([]sluice.Decision, 2)
	if err := tagged.Take(ctx, time.Time{}, costed(5, two), out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("tagged: %+v, %v", out, err)
	}
	// the user rule has nothing left: the ip rule must not be charged
	if err := tagged.Take(ctx, time.Time{}, []sluice.Check{{Rule: ip, Key: "198.51.100.1"}, two[1]}, out); err != nil || out[1].Allowed || !out[0].Allowed {
		t.Fatalf("tagged, user exhausted: %+v, %v", out, err)
	}
	if err := tagged.Take(ctx, time.Time{}, costed(0, []sluice.Check{{Rule: ip, Key: "198.51.100.1"}}), out); err != nil || out[0].Remaining != 5 {
		t.Fatalf("the other ip was charged: %+v, %v", out[0], err)
	}

	// The conformance suite, with one hash tag per test so that its
	// requests on several keys stay atomic.
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Config{
			New: func(t *testing.T) sluice.Store {
				s := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithDenyCache(0),
					redis.WithClockSkew(time.Hour), redis.WithTimeout(5*time.Second),
					redis.WithHashTag(func(sluice.Check) string { return t.Name() }))
				return µsStore{s}
			},
			Resolution: time.Microsecond,
		})
	})
}

// TestProcesses: several processes (this test binary, run again) share
// one key; exactly the limit is allowed in all.
func TestProcesses(t *testing.T) {
	if addr := os.Getenv("SLUICE_REDIS_CHILD"); addr != "" {
		child(t, addr, os.Getenv("SLUICE_REDIS_PREFIX"))
		return
	}
	srv := startRedis(t)
	p := prefix(t)
	const procs, limit = 4, 500
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	outs := make([]strings.Builder, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestProcesses$", "-test.count=1", "-test.timeout=1m")
		cmd.Env = append(os.Environ(), "SLUICE_REDIS_CHILD="+srv.addr(), "SLUICE_REDIS_PREFIX="+p)
		cmd.Stdout = &outs[i]
		cmd.Stderr = &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	total := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d (a minute at most): %v\n%s", i, err, outs[i].String())
		}
		var n int
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if v, ok := strings.CutPrefix(line, "allowed="); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		t.Logf("child %d: %d allowed", i, n)
		total += n
	}
	if total != limit {
		t.Fatalf("%d allowed in %d processes, want exactly %d", total, procs, limit)
	}
}

// child is one process of TestProcesses: 8 goroutines take from the key
// until each has been denied 20 times.
func child(t *testing.T, addr, p string) {
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithTimeout(5*time.Second), redis.WithDenyCache(0))
	c := []sluice.Check{{Rule: prep(sluice.Rule{Name: "shared", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerDay(500)}), Key: "k"}}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			out := make([]sluice.Decision, 1)
			for denied := 0; denied < 20; {
				if err := s.Take(context.Background(), time.Now(), c, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				} else {
					denied++
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("allowed=%d\n", allowed)
}

// TestFunctionsThroughClient: a store that sends its runs through a
// Cluster's or a Ring's client (WithoutBatching) runs them by FCALL on
// whichever master or shard holds the key, and a Redis that lost its
// functions (FUNCTION FLUSH, as a restart without persistence) gets the
// library again on the next run, with every decision right.
func TestFunctionsThroughClient(t *testing.T) {
	ctx := context.Background()
	cl := startCluster(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": startRedis(t).addr(), "b": startRedis(t).addr()}})
	t.Cleanup(func() { ring.Close() })
	for _, c := range []struct {
		name    string
		client  goredis.UniversalClient
		servers func(func(context.Context, *goredis.Client) error) error
	}{
		{"cluster", cl.client(t), func(f func(context.Context, *goredis.Client) error) error {
			return cl.client(t).ForEachMaster(ctx, f)
		}},
		{"ring", ring, func(f func(context.Context, *goredis.Client) error) error { return ring.ForEachShard(ctx, f) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := func(cmd string) int64 {
				var mu sync.Mutex
				n := int64(0)
				if err := c.servers(func(_ context.Context, rc *goredis.Client) error {
					mu.Lock()
					defer mu.Unlock()
					n += commandCalls(t, rc, cmd)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return n
			}
			s := newStore(t, c.client, redis.WithPrefix(prefix(t)), redis.WithoutBatching())
			rule := prep(sluice.Rule{Name: "gcra", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(2)})
			take := func(key string, want bool) {
				t.Helper()
				out := make([]sluice.Decision, 1)
				if err := s.Take(ctx, time.Time{}, []sluice.Check{{Rule: rule, Key: key}}, out); err != nil || out[0].Allowed != want {
					t.Fatalf("take %s = %+v, %v; want allowed %v", key, out[0], err, want)
				}
			}
			evalsha := calls("evalsha")
			for k := range 20 {
				take(fmt.Sprint("user", k), true)
			}
			if calls("fcall") < 20 || calls("evalsha") != evalsha {
				t.Fatalf("fcall %d, evalsha %d more: want every run by FCALL", calls("fcall"), calls("evalsha")-evalsha)
			}
			if err := c.servers(func(ctx context.Context, rc *goredis.Client) error { return rc.FunctionFlush(ctx).Err() }); err != nil {
				t.Fatal(err)
			}
			reloads := s.Stats().Reloads
			for k := range 20 {
				take(fmt.Sprint("user", k), true)
				take(fmt.Sprint("user", k), false)
			}
			if st := s.Stats(); st.Reloads == reloads || calls("evalsha") != evalsha {
				t.Errorf("after FUNCTION FLUSH: reloads %d → %d, evalsha %d more; want the library loaded again, FCALL", reloads, st.Reloads, calls("evalsha")-evalsha)
			}
		})
	}
}
