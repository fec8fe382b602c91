//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testfifo"
)

// within runs f and fails the test if it does not return within seconds.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	c := make(chan T, 1)
	start := time.Now()
	go func() { c <- f() }()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		// The helper in mkfifo sets the reader free a moment later:
		// it is the taking that long which fails the test.
		v := <-c
		t.Errorf("%s took %v: it waited on a named pipe", what, time.Since(start).Round(time.Second))
		return v
	}
}

// A named pipe where a config file should be is refused, never read: a
// read waits for a writer that may never come.
func TestLoadRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	testfifo.Make(t, fifo)
	writeFile(t, filepath.Join(dir, "good.yaml"), domainFile("good"))
	link := filepath.Join(t.TempDir(), "link.yaml")
	symlink(t, fifo, link)

	for _, path := range []string{fifo, link, dir} {
		err := within(t, "Load("+path+")", func() error {
			_, err := Load(path)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), ".yaml: a named pipe, not a regular file") {
			t.Errorf("Load(%s) = %v, want the named pipe refused", path, err)
		}
		if _, err := Files(path); err == nil || !strings.Contains(err.Error(), "a named pipe") {
			t.Errorf("Files(%s) = %v, want the named pipe refused", path, err)
		}
	}
	if _, err := OpenFile(link); err == nil || !strings.Contains(err.Error(), "a named pipe") {
		t.Errorf("OpenFile(%s) = %v, want the named pipe refused", link, err)
	}
	// A file swapped for a pipe between OpenFile's look and its open is
	// opened without waiting, then refused.
	f := within(t, "openNonblocking(pipe)", func() *os.File {
		f, err := openNonblocking(fifo)
		if err != nil {
			t.Error(err)
		}
		return f
	})
	if f != nil {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkFile(fifo, fi); err == nil || !strings.Contains(err.Error(), "a named pipe") {
			t.Errorf("checkFile(the opened pipe) = %v, want it refused", err)
		}
		f.Close()
	}
}

// A device is no config file either: /dev/zero would never end.
func TestLoadRefusesDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip(err)
	}
	if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "/dev/zero: a device, not a regular file") {
		t.Errorf("Load(/dev/zero) = %v, want the device refused", err)
	}
}
