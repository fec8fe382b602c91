//go:build unix

package config

import (
	"os"
	"syscall"
)

// openNonblocking opens name for reading without waiting: a named pipe
// opens at once, writer or not, where an ordinary open would block.
func openNonblocking(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// setBlocking undoes O_NONBLOCK once f is known to be a regular file, for
// which it means nothing to most file systems but may to some.
func setBlocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
