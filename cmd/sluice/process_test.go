package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveProcess runs sluice serve with args in a child process (this test
// binary, which TestMain turns into sluice serve) on loopback ports and
// no admin listener, until the test ends, and returns it with its banner
// ("http", "grpc", ... as startServe reads it).
func serveProcess(t *testing.T, args ...string) (*exec.Cmd, map[string]string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^$")
	args = append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", ""}, args...)
	cmd.Env = append(os.Environ(), serveArgsEnv+"="+strings.Join(args, "\n"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	// A process that prints no banner within 30s is killed, which ends
	// the wait for it.
	late := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	banner := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			banner[f[0]] = f[1]
		}
		if len(f) > 0 && f[0] == "shadow" {
			break // the banner's last line
		}
	}
	late.Stop()
	go io.Copy(io.Discard, out)
	if banner["http"] == "" || banner["grpc"] == "" {
		t.Fatalf("sluice serve %s printed no banner within 30s", strings.Join(args, " "))
	}
	return cmd, banner
}
