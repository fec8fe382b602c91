// Package testredis starts a redis-server of a test's own, on a free port
// of the loopback interface, and stops it when the test ends; or three of
// them as a Redis Cluster. A test never touches a server it did not
// start.
package testredis

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
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

// start starts redis-server with extra arguments. A port found free may
// be taken by another process before redis-server binds it: redis-server
// then exits, and is started again on another port.
func start(t testing.TB, extra ...string) (addr string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server; scripts/test installs it): skipping")
	}
	const tries = 5
	for try := 1; ; try++ {
		addr, out := startOnce(t, bin, extra)
		if addr != "" {
			return addr
		}
		if try == tries || !strings.Contains(out, "Address already in use") {
			t.Fatalf("redis-server exited before it was ready (try %d of %d):\n%s", try, tries, out)
		}
	}
}

// startOnce starts redis-server on a port found free and returns its
// address once it says it is ready, which it says only of its own
// listener (a process that took the port would answer a dial); or "" and
// its output when it exits first.
func startOnce(t testing.TB, bin string, extra []string) (addr, out string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, extra...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready, exited := make(chan struct{}), make(chan struct{})
	var log strings.Builder // read once exited
	go func() {
		defer close(exited)
		defer r.Close()
		said := false // the rest is only drained
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if !said {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "Ready to accept connections") {
					said = true
					close(ready)
				}
			}
		}
	}()
	select {
	case <-ready:
		return addr, ""
	case <-exited:
		return "", log.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("redis-server on %s not ready after 60s", addr)
	}
	return "", ""
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
