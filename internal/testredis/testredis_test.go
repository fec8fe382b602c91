package testredis

import (
	"net"
	"os/exec"
	"strings"
	"testing"
)

// A redis-server that exits before it is ready is reported with its
// output, not waited for; one that starts is dialed at the address given.
func TestStartOnce(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	s, out := runOnce(t, bin, []string{"--port", "not-a-port"})
	if s != nil || !strings.Contains(out, "port") {
		t.Fatalf("a bad port: server %+v, output %q; want none, and redis-server's complaint", s, out)
	}
	addr := Start(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
