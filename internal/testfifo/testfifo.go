//go:build unix

// Package testfifo helps tests of code that must never wait on a named
// pipe: LetThrough keeps releasing whatever blocks on one, so that such a
// test fails rather than hangs.
package testfifo

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Make makes a named pipe at path and lets readers through it (LetThrough)
// until the test ends.
func Make(t testing.TB, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(LetThrough(path))
}

// LetThrough opens path, a named pipe, for writing and closes it again
// every 10ms until stop is called: a reader blocked opening the pipe gets
// it, and reads an empty file.
func LetThrough(path string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			// A writer's open (which fails at once with no reader) lets a
			// blocked reader's open return; closing it gives the reader EOF.
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
