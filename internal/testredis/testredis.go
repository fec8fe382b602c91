// Package testredis starts a redis-server of a test's own, on a free port
// of the loopback interface, and stops it when the test ends; or three of
// them as a Redis Cluster. A test never touches a server it did not
// start.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Start starts redis-server and returns its address once it listens. It
// skips the test when redis-server is not installed (scripts/test installs
// it).
func Start(t testing.TB) (addr string) {
	t.Helper()
	return start(t)
}

// StartWith starts redis-server with extra arguments, such as
// --requirepass, and returns its address once it listens.
func StartWith(t testing.TB, extra ...string) (addr string) {
	t.Helper()
	return start(t, extra...)
}

// start starts redis-server with extra arguments.
func start(t testing.TB, extra ...string) (addr string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server; scripts/test installs it): skipping")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not listen on %s after 60s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // redis starts on its own time
	}
}

// StartCluster starts three redis-servers as a Redis Cluster of three
// masters, each holding a third of the slots, and returns their addresses
// once every node says the cluster is ok. It skips the test when
// redis-server or redis-cli is not installed.
func StartCluster(t testing.TB) (addrs []string) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed (Debian: apt-get install redis-tools; scripts/test installs it): skipping")
	}
	for range 3 {
		addrs = append(addrs, start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"))
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	// redis-cli waits for the nodes to join, for ever if they do not.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create (a minute at most): %v\n%s", err, out)
	}
	// redis-cli returns once the nodes agree on the slots; wait until each
	// says the cluster is ok.
	deadline := time.Now().Add(60 * time.Second)
	ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		for {
			out, err := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok on %s after 60s: %v %s", a, err, out)
			}
			time.Sleep(20 * time.Millisecond) // the nodes gossip on their own time
		}
	}
	return addrs
}
