// Package statsdtest is a statsd for tests: it listens on a free
// loopback port and passes on each line it receives.
package statsdtest

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// Lines listens on a free loopback port, network "tcp" (statsd) or
// "udp" (DogStatsD), until t ends, and passes on each line it receives.
func Lines(t testing.TB, network string) (addr string, lines <-chan string) {
	t.Helper()
	ch := make(chan string, 4096)
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				for l := range strings.SplitSeq(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
					ch <- l
				}
			}
		}()
		return pc.LocalAddr().String(), ch
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					ch <- sc.Text()
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}
