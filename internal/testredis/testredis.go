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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Start starts redis-server and returns its address once it listens. It
// skips the test when redis-server is not installed (scripts/test installs
// it).
func Start(t testing.TB) (addr string) {
	t.Helper()
	return Run(t, "redis-server").Addr
}

// StartWith starts redis-server with extra arguments, such as
// --requirepass, and returns its address once it listens.
func StartWith(t testing.TB, extra ...string) (addr string) {
	t.Helper()
	return Run(t, "redis-server", extra...).Addr
}

// Server is a server Run started: its address, and its process, which
// the test may stop, continue or kill.
type Server struct {
	Addr string
	Cmd  *exec.Cmd
}

// PortArg, in Run's arguments, stands for the port Run finds, for a
// server listening on another flag than --port (--tls-port).
const PortArg = "{port}"

// Run starts bin (redis-server, or redis-sentinel with its config file
// first in args) on the loopback interface and a port found free, without
// persistence, in a directory of the test's, with args after those
// (overriding them), and returns it once it says it is ready, which it
// says only of its own listener (another process that took the port would
// answer a dial). A port found free may be taken by another process
// before the server binds it: the server then exits, and is started again
// on another port. Run skips the test when bin is not installed, and
// kills the server when the test ends.
func Run(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s is not installed (Debian: apt-get install redis-server redis-sentinel; scripts/test installs them): skipping", bin)
	}
	const tries = 5
	for try := 1; ; try++ {
		s, out := runOnce(t, path, args)
		if s != nil {
			return s
		}
		if try == tries || !strings.Contains(out, "Address already in use") {
			t.Fatalf("%s exited before it was ready (try %d of %d):\n%s", bin, try, tries, out)
		}
	}
}

// runOnce is one start of Run: the server once ready, or nil and its
// output when it exits first.
func runOnce(t testing.TB, bin string, args []string) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	var conf []string // a config file comes first
	if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
		conf, args = args[:1], args[1:]
	}
	args = slices.Clone(args)
	own := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--protected-mode", "no"}
	if i := slices.Index(args, PortArg); i >= 0 {
		args[i] = port
	} else {
		own = append(own, "--port", port)
	}
	s := &Server{Addr: "127.0.0.1:" + port, Cmd: exec.Command(bin, slices.Concat(conf, own, args)...)}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = w, w
	err = s.Cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued
		s.Cmd.Process.Kill()
		s.Cmd.Wait()
	})
	ready, exited := make(chan struct{}), make(chan struct{})
	var log strings.Builder // read once exited
	go func() {
		defer close(exited)
		defer r.Close()
		said := false // the rest is only drained
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if said {
				continue
			}
			log.WriteString(sc.Text() + "\n")
			// A server says it is ready once it listens and has loaded
			// its data; a sentinel says its id once it listens.
			if strings.Contains(sc.Text(), "Ready to accept connections") || strings.Contains(sc.Text(), "Sentinel ID is") {
				said = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return s, ""
	case <-exited:
		return nil, log.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("%s on %s not ready after 60s", bin, s.Addr)
	}
	return nil, ""
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
		addrs = append(addrs, StartWith(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"))
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
