//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// sluice check on a named pipe says so and exits 1, rather than wait for
// a writer.
func TestCheckNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runArgs(t, "check", path)
		done <- result{code, stderr}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Error("sluice check waited on a named pipe")
		// Let it through: a writer's open and close give it EOF.
		for got := false; !got; {
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			select {
			case r = <-done:
				got = true
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if want := path + ": a named pipe, not a regular file\n"; r.code != exitFail || r.stderr != want {
		t.Errorf("sluice check %s: exit %d, stderr %q; want 1 and %q", path, r.code, r.stderr, want)
	}
}
