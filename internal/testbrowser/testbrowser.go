// Package testbrowser finds the browser that tests of what a browser does
// run: Debian's chromium, which scripts/test installs.
package testbrowser

import (
	"os/exec"
	"testing"
)

// Chromium returns the path of chromium (or Chrome), or skips the test
// when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not found: ./scripts/test installs it (apt-get install chromium)")
	return ""
}
