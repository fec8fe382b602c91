//go:build !unix

package config

import "os"

// openNonblocking opens name for reading. Named pipes that block an open
// are a Unix matter.
func openNonblocking(name string) (*os.File, error) { return os.Open(name) }

func setBlocking(*os.File) error { return nil }
