package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
)

// redisProc is a redis-server (or a sentinel) the test started and may
// kill, stop and continue.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
	once sync.Once
}

// startRedisProc runs bin (redis-server, or redis-sentinel with its config
// file first) with args on a port found free, once it says it is ready
// (testredis.Run).
func startRedisProc(t *testing.T, bin string, args ...string) *redisProc {
	t.Helper()
	s := testredis.Run(t, bin, args...)
	return &redisProc{addr: s.Addr, cmd: s.Cmd}
}

// kill stops the process at once, as a crash would.
func (p *redisProc) kill() {
	p.once.Do(func() {
		p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
}

func (p *redisProc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, or fails the test after d: a bound
// on a wait for other processes, never an assertion on their speed, and
// so tens of seconds, which a machine loaded with other work may take.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not yet %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // the other processes move on their own time
	}
}

// sentinelBin returns how to run a sentinel: redis-sentinel, or
// redis-server --sentinel.
func sentinelBin(t *testing.T) (bin string, args []string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server redis-sentinel; scripts/test installs them): skipping")
	}
	if p, err := exec.LookPath("redis-sentinel"); err == nil {
		return p, nil
	}
	t.Skip("redis-sentinel is not installed (Debian: apt-get install redis-sentinel; scripts/test installs it): skipping")
	return "", nil
}

// sentinelYAML's windows are a day long, so that no window ends while
// the test runs, however slowly (see stableWindow).
const sentinelYAML = `domain: shop
descriptors:
  - key: open
    rate_limit: {unit: day, requests_per_unit: 2, failure: open}
  - key: closed
    rate_limit: {unit: day, requests_per_unit: 2, failure: closed}
  - key: local
    rate_limit: {unit: day, requests_per_unit: 2, failure: local}
`

// sluice serve -redis-sentinel through a real failover: a master and a
// replica, three sentinels. The master is killed (its sentinels held
// still meanwhile, so that the outage lasts while the test looks): once
// it has been silent for a second, each rule's failure mode decides. Then the sentinels promote the replica,
// and the service decides from it, with the counts it had replicated.
func TestServeSentinelFailover(t *testing.T) {
	sbin, _ := sentinelBin(t)
	// The store keeps its default deadline, 50ms, here, not the tests'
	// 10s: with a deadline of 2s or 10s the service did not find the
	// promoted replica within the minute waited below.
	master := startRedisProc(t, "redis-server")
	_, mport, _ := net.SplitHostPort(master.addr)
	replica := startRedisProc(t, "redis-server", "--replicaof", "127.0.0.1", mport)
	rc := goredis.NewClient(&goredis.Options{Addr: replica.addr, MaxRetries: -1})
	defer rc.Close()
	waitFor(t, 60*time.Second, "the replica in sync", func() bool {
		info, _ := rc.Info(t.Context(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})

	var sentinels []*redisProc
	var saddrs []string
	for i := range 3 {
		conf := filepath.Join(t.TempDir(), fmt.Sprintf("sentinel%d.conf", i))
		text := fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %s 2\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\nsentinel parallel-syncs mymaster 1\n", mport)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startRedisProc(t, sbin, conf)
		sentinels = append(sentinels, s)
		saddrs = append(saddrs, s.addr)
	}
	// Each sentinel must know the replica and the others before the
	// master goes, or there is no one to promote.
	for _, s := range sentinels {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.addr})
		defer sc.Close()
		waitFor(t, 60*time.Second, "sentinel "+s.addr+" knows the replica and two sentinels", func() bool {
			reps, err1 := sc.Replicas(t.Context(), "mymaster").Result()
			sens, err2 := sc.Sentinels(t.Context(), "mymaster").Result()
			return err1 == nil && err2 == nil && len(reps) == 1 && len(sens) == 2
		})
	}

	s := startServe(t, "-config", writeConfig(t, sentinelYAML), "-redis-sentinel", "mymaster@"+strings.Join(saddrs, ","), "-redis-timeout", defaultRedisTimeout.String())
	if want := "redis sentinel mymaster@" + strings.Join(saddrs, ","); s.banner["store"] != want {
		t.Errorf("banner store %q, want %q", s.banner["store"], want)
	}
	run := fmt.Sprint(time.Now().UnixNano())
	stableWindow(24*time.Hour, 10*time.Minute)
	post := func(key, value string) int {
		t.Helper()
		code, _ := s.postJSON(t, "shop", key, value+run)
		return code
	}
	// Before: the master counts. A call that misses the store's deadline
	// (50ms, which a loaded machine can miss) leaves the decision to the
	// rule's failure mode and counts nothing: such a request is sent
	// again, until the master holds its key.
	mc := goredis.NewClient(&goredis.Options{Addr: master.addr, MaxRetries: -1})
	defer mc.Close()
	counted := func(c *goredis.Client, k string) bool {
		keys, _ := c.Keys(t.Context(), "sluice:{*"+k+"=a"+run+"*").Result()
		return len(keys) == 1
	}
	for _, k := range []string{"open", "closed", "local"} {
		waitFor(t, 60*time.Second, k+"=a counted on the master", func() bool {
			if counted(mc, k) {
				return true // a request that missed the deadline, counted late
			}
			post(k, "a")
			return counted(mc, k)
		})
	}
	waitFor(t, 60*time.Second, "the counts replicated", func() bool {
		return counted(rc, "open") && counted(rc, "closed") && counted(rc, "local")
	})

	// The master dies; the sentinels are held still, so that the outage
	// lasts while the failure modes are checked.
	for _, sn := range sentinels {
		sn.signal(t, syscall.SIGSTOP)
	}
	master.kill()
	// Until a second has passed since its last answer, a Redis that does
	// not answer in time is taken for one too busy to, and the requests
	// are shed (429); then the failure modes decide.
	waitFor(t, 30*time.Second, "the failure modes deciding", func() bool { return post("open", "w") == 200 })
	for i := range 3 {
		if code := post("open", "b"); code != 200 {
			t.Errorf("open, Redis down, request %d: %d, want 200", i, code)
		}
		if code := post("closed", "b"); code != 429 {
			t.Errorf("closed, Redis down, request %d: %d, want 429", i, code)
		}
		// local: this process alone counts, 2 a day.
		if code, want := post("local", "b"), map[bool]int{true: 200, false: 429}[i < 2]; code != want {
			t.Errorf("local, Redis down, request %d: %d, want %d", i, code, want)
		}
	}

	// The sentinels go on, see the master down and promote the replica;
	// the service finds it and decides there again.
	for _, sn := range sentinels {
		sn.signal(t, syscall.SIGCONT)
	}
	waitFor(t, 90*time.Second, "a rule that fails closed allowed again, from the new master", func() bool {
		return post("closed", "c") == 200
	})
	info, err := rc.Info(t.Context(), "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("the replica is not the master: %v %s", err, info)
	}
	// The new master had the count of closed=a (1 of 2) and takes the
	// next: one more is allowed, then over.
	if code := post("closed", "a"); code != 200 {
		t.Errorf("closed=a, 2nd of 2 after the failover: %d, want 200", code)
	}
	if code := post("closed", "a"); code != 429 {
		t.Errorf("closed=a, 3rd after the failover: %d, want 429 (the count before the failover kept)", code)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if keys, err := rc.Keys(ctx, "sluice:*").Result(); err != nil || len(keys) < 4 {
		t.Errorf("keys on the new master: %v, %v", keys, err)
	}
}
