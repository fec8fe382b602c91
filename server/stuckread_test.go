package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckReads makes every read of s's config files block, as on a network
// file system that stopped answering, until release is called or the
// test ends. entered receives when a read has started. Call it before
// the server's watcher starts.
func stuckReads(t *testing.T, s *Server) (entered <-chan struct{}, release func()) {
	c := make(chan struct{}, 16)
	gate := make(chan struct{})
	s.hashFiles = func(paths []string) string {
		c <- struct{}{}
		<-gate
		return hashFiles(paths)
	}
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	return c, release
}

// wait fails the test if c does not receive within seconds.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
	}
}

// Serve's shutdown does not wait on a read of the config files that
// does not return.
func TestShutdownDoesNotWaitOnRead(t *testing.T) {
	srv, clock := newServer(t, Settings{ReloadInterval: 10 * time.Millisecond})
	entered, release := stuckReads(t, srv)
	e := serve(t, srv, clock)
	wait(t, entered, "a poll's read")

	// Reload waits for the read in flight only as long as its context.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- e.srv.Reload(ctx) }()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Reload while a read is stuck = %v, want its context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Reload did not return within 10s of its context's end: it waits on the read")
	}

	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Serve did not return within 10s of the shutdown: it waits on the read")
		release()
		<-e.done
	}
	close(e.done)
}

// A Reload whose context ends while it reads returns at once and changes
// nothing; once the read returns, the next Reload goes ahead.
func TestReloadAbandonsStuckRead(t *testing.T) {
	logs := &logBuffer{}
	s, _ := newServer(t, Settings{ReloadInterval: -1, Logger: logs.logger()})
	entered, release := stuckReads(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.Reload(ctx) }()
	wait(t, entered, "Reload's read")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Reload = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reload did not return within 10s of its context's end")
	}
	if l := logs.String(); !strings.Contains(l, "config reload abandoned") {
		t.Errorf("the log does not tell of the abandoned reload:\n%s", l)
	}
	// The abandoned read holds the lock still: a poll lets its turn go.
	s.poll(t.Context())

	release()
	if err := s.Reload(t.Context()); err != nil {
		t.Errorf("Reload after the stuck read returned = %v", err)
	}
	if got := counter(t, s, "sluice_config_reloads_total", "result", "success"); got != 1 {
		t.Errorf("successful reloads = %v, want 1: the abandoned one counts for nothing", got)
	}
}
