package statsd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server/internal/statsdtest"
)

// tcpLines and udpLines listen on a free port and pass on each statsd
// line they receive.
func tcpLines(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	return statsdtest.Lines(t, "tcp")
}

func udpLines(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	return statsdtest.Lines(t, "udp")
}

// collect reads lines until every one of want has come, or fails after a
// deadline.
func collect(t *testing.T, lines <-chan string, want []string) {
	t.Helper()
	missing := make(map[string]bool)
	for _, w := range want {
		missing[w] = true
	}
	deadline := time.After(20 * time.Second)
	var got []string
	for len(missing) > 0 {
		select {
		case l := <-lines:
			got = append(got, l)
			delete(missing, l)
		case <-deadline:
			t.Fatalf("lines %v never came; got %q", missing, got)
		}
	}
}

func TestSinkLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dog    bool
		listen func(*testing.T) (string, <-chan string)
		want   []string
	}{
		{"statsd over TCP", false, tcpLines, []string{
			"ratelimit.service.rate_limit.d.k.total_hits.__env=prod.__zone=a:5|c",
			"ratelimit_server.ShouldRateLimit.response_time.__env=prod.__zone=a:1.5|ms",
		}},
		{"DogStatsD over UDP", true, udpLines, []string{
			"ratelimit.service.rate_limit.d.k.total_hits:5|c|#env:prod,zone:a",
			"ratelimit_server.ShouldRateLimit.response_time:1.5|ms|#env:prod,zone:a",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, lines := tc.listen(t)
			s, err := New(Config{Addr: addr, Dog: tc.dog, FlushInterval: time.Hour, Tags: []Tag{{"zone", "a"}, {"env", "prod"}}})
			if err != nil {
				t.Fatal(err)
			}
			c := s.Counter("ratelimit.service.rate_limit.d.k.total_hits")
			c.Add(2)
			s.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(3)
			s.Counter("ratelimit.service.rate_limit.d.k.over_limit") // zero: not sent
			s.Timing("ratelimit_server.ShouldRateLimit.response_time", 1500*time.Microsecond)
			s.Flush(context.Background())
			collect(t, lines, tc.want)
			if d := s.Dropped(); d != 0 {
				t.Errorf("Dropped() = %d, want 0", d)
			}
		})
	}
}

func TestSinkDropsWhenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	s, err := New(Config{Addr: addr, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Counter("a").Add(1)
	s.Counter("b").Add(1)
	s.Flush(context.Background())
	if d := s.Dropped(); d != 2 {
		t.Errorf("Dropped() = %d, want 2", d)
	}
	// Counting goes on, into the next flush.
	s.Counter("a").Add(1)
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []Config{
		{Addr: "localhost:8125"},
		{Addr: "localhost", FlushInterval: time.Second},
		{Addr: "localhost:8125", FlushInterval: time.Second, Tags: []Tag{{"", "v"}}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want one", c)
		}
	}
}

// A gauge is sent at every flush, zero included, after Generate's
// function has set it.
func TestSinkGauges(t *testing.T) {
	addr, lines := tcpLines(t)
	s, err := New(Config{Addr: addr, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g := s.Gauge("ratelimit.go.alloc")
	s.Gauge("ratelimit.go.sys") // never set: sent as 0
	n := uint64(0)
	s.Generate(func() {
		n++
		g.Set(1000 * n)
	})
	s.Flush(context.Background())
	collect(t, lines, []string{"ratelimit.go.alloc:1000|g", "ratelimit.go.sys:0|g"})
	s.Flush(context.Background())
	collect(t, lines, []string{"ratelimit.go.alloc:2000|g", "ratelimit.go.sys:0|g"})
}
