package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// server is a redis-server the test started, on a port of its own. Tests
// may FLUSHALL it, kill it and start it again.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// needRedis returns the path of redis-server or fails the test with what
// to install.
func needRedis(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: these tests start their own; install it (Debian: apt-get install redis-server redis-tools), or run scripts/test, which does")
	}
	return p
}

// freePort asks the kernel for a port nobody listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts a redis-server on a free port with extra arguments and
// stops it when the test ends.
func startRedis(t testing.TB, extra ...string) *server {
	t.Helper()
	needRedis(t)
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), args: extra}
	// Another process may take the free port before the server binds it:
	// then it starts on another.
	for range 4 {
		if log, ok := s.tryStart(); ok || !strings.Contains(log, "Address already in use") {
			break
		}
		s.port = freePort(t)
	}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it says it accepts connections,
// unless it runs already.
func (s *server) start() {
	s.t.Helper()
	if log, ok := s.tryStart(); !ok {
		s.t.Fatalf("redis-server on port %d did not start:\n%s", s.port, log)
	}
}

// tryStart runs the server, unless it runs already, and waits until it
// says it accepts connections; else it returns what it logged.
func (s *server) tryStart() (log string, ok bool) {
	s.t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return "", true
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no", "--loglevel", "notice",
	}, s.args...)
	cmd := exec.Command(needRedis(s.t), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	ready := make(chan struct{})
	var logged strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled {
				logged.WriteString(sc.Text() + "\n")
			}
			if !signalled && strings.Contains(sc.Text(), "Ready to accept connections") {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		s.t.Fatalf("redis-server on port %d did not start", s.port)
	}
	if !strings.Contains(logged.String(), "Ready to accept") {
		cmd.Wait()
		return logged.String(), false
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	return "", true
}

// kill stops the server at once, as a crash would.
func (s *server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// signal sends sig to the server: SIGSTOP pauses it, as a machine that
// stops scheduling it would, SIGCONT resumes it.
func (s *server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// client is a go-redis client for the server, closed with the test. It
// does not retry, so that no test counts a charge twice.
func (s *server) client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster is three redis-servers as a Redis Cluster of three masters.
type cluster struct {
	nodes []*server
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found: install it (Debian: apt-get install redis-tools), or run scripts/test, which does")
	}
	c := &cluster{}
	args := []string{"--cluster", "create"}
	for range 3 {
		n := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		c.nodes = append(c.nodes, n)
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create (a minute at most): %v\n%s", err, out)
	}
	// redis-cli returns once the nodes agree on the slots; wait until each
	// says the cluster is ok.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		rc := n.client(t)
		tick := time.NewTicker(20 * time.Millisecond)
		for {
			info, err := rc.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("cluster not ok on %s: %v %s", n.addr(), err, info)
			case <-tick.C:
			}
		}
		tick.Stop()
	}
	return c
}

func (c *cluster) client(t testing.TB) *goredis.ClusterClient {
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.addr())
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRedirects: 3})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// prefix is a key prefix unique to the test.
func prefix(t testing.TB) string {
	return fmt.Sprintf("t:%s:%d:", strings.NewReplacer("/", ".", "{", "(", "}", ")").Replace(t.Name()), time.Now().UnixNano())
}
