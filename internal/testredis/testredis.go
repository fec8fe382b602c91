// Package testredis starts a redis-server of a test's own, on a free port
// of the loopback interface, and stops it when the test ends. A test never
// touches a server it did not start.
package testredis

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"
)

// Start starts redis-server and returns its address once it listens. It
// skips the test when redis-server is not installed (scripts/test installs
// it).
func Start(t testing.TB) (addr string) {
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
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not listen on %s after 10s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // redis starts on its own time
	}
}
