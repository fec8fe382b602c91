//go:build unix

package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testfifo"
)

// A config path that is a named pipe is refused at start, not waited on.
func TestNewRefusesNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := New(Settings{Paths: []string{path}, Store: newStore(t)})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Error("New waited on a named pipe")
		defer testfifo.LetThrough(path)()
		err = <-done
	}
	if err == nil || !strings.Contains(err.Error(), "pipe.yaml: a named pipe, not a regular file") {
		t.Errorf("New(a named pipe) = %v, want it refused", err)
	}
}

// A config file replaced by a named pipe while serving: the reload fails
// and says why, the last good config keeps serving, and the shutdown
// does not wait on the pipe.
func TestReloadNamedPipe(t *testing.T) {
	path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
	logs := &logBuffer{}
	e := start(t, Settings{Paths: []string{path}, ReloadInterval: 10 * time.Millisecond, Logger: logs.logger()})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}

	for deadline := time.Now().Add(10 * time.Second); counter(t, e.srv, "sluice_config_reloads_total", "result", "failure") == 0; {
		if time.Now().After(deadline) {
			t.Error("no failed reload within 10s: the watcher waits on the named pipe")
			defer testfifo.LetThrough(path)()
			e.stop(t)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "test.yaml: a named pipe, not a regular file") {
		t.Errorf("the log does not say why the reload failed:\n%s", l)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=a"))
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetName() != "per_user" {
		t.Errorf("after the failed reload: %v, %v; want the last good config", resp, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.srv.Reload(ctx); err == nil || !strings.Contains(err.Error(), "a named pipe") {
		t.Errorf("Reload = %v, want the named pipe refused", err)
	}

	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Serve did not return within 10s of the shutdown: it waits on the named pipe")
		defer testfifo.LetThrough(path)()
		<-e.done
	}
	close(e.done)
}
