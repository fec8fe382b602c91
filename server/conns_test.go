package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The bounds on connections and streams default, and refuse values out
// of range with an error naming the field.
func TestConnBoundsConfig(t *testing.T) {
	c, err := Settings{Store: newStore(t)}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPCMaxStreams != DefaultGRPCMaxStreams || c.GRPCRecvTimeout != DefaultGRPCRecvTimeout ||
		c.GRPCMaxConnections != DefaultMaxConnections || c.HTTPMaxConnections != DefaultMaxConnections ||
		c.MaxConnectionIdle != DefaultMaxConnectionIdle {
		t.Errorf("defaults: %d streams, recv %v, %d and %d connections, idle %v", c.GRPCMaxStreams, c.GRPCRecvTimeout,
			c.GRPCMaxConnections, c.HTTPMaxConnections, c.MaxConnectionIdle)
	}
	for _, tt := range []struct {
		cfg  Settings
		want string
	}{
		{Settings{GRPCMaxStreams: -1}, "GRPCMaxStreams -1 must be between 1 and"},
		{Settings{GRPCMaxStreams: MaxGRPCStreams + 1}, "GRPCMaxStreams 1048577 must be between 1 and"},
		{Settings{GRPCMaxConnections: -3}, "GRPCMaxConnections -3"},
		{Settings{HTTPMaxConnections: MaxConnections + 1}, "HTTPMaxConnections 1048577"},
		{Settings{GRPCRecvTimeout: -time.Second}, "GRPCRecvTimeout -1s must be positive"},
		{Settings{GRPCRecvTimeout: 2 * time.Hour}, "GRPCRecvTimeout 2h0m0s must be positive and at most 1h0m0s"},
	} {
		tt.cfg.Store = newStore(t)
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tt.cfg, err, tt.want)
		}
	}
}

// accepted reports whether the server keeps c open: a connection past
// the bound is closed at once, and reading it ends; one within it waits
// for a request, until the read deadline.
func accepted(t *testing.T, c net.Conn) bool {
	t.Helper()
	// Long enough that a loaded machine has accepted and closed a
	// connection past the bound; a connection kept open costs the wait.
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Connections past the bound are closed as soon as accepted, on each
// listener, and counted; a place given back is taken again.
func TestConnectionsBounded(t *testing.T) {
	e := start(t, Settings{HTTPMaxConnections: 2, GRPCMaxConnections: 1})
	e.waitReady(t)
	httpAddr := strings.TrimPrefix(e.base, "http://")
	a, b := rawConn(t, httpAddr, ""), rawConn(t, httpAddr, "")
	// Both are accepted before the third arrives: each answers.
	for _, c := range []net.Conn{a, b} {
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
			t.Fatalf("a connection within the bound: %q, %v", line, err)
		}
	}
	if accepted(t, rawConn(t, httpAddr, "")) {
		t.Error("a third HTTP connection was kept open, past the bound of 2")
	}
	if got := counter(t, e.srv, "sluice_connections_refused_total", "listener", "http"); got != 1 {
		t.Errorf("sluice_connections_refused_total{listener=http} = %v, want 1", got)
	}
	a.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !accepted(t, rawConn(t, httpAddr, "")) {
		if time.Now().After(deadline) {
			t.Fatal("no HTTP connection kept open 30s after one of two closed")
		}
	}

	// The client's one connection takes the gRPC bound.
	if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=ann")); err != nil {
		t.Fatal(err)
	}
	if accepted(t, rawConn(t, e.conn.Target(), "")) {
		t.Error("a second gRPC connection was kept open, past the bound of 1")
	}
	if got := counter(t, e.srv, "sluice_connections_refused_total", "listener", "grpc"); got != 1 {
		t.Errorf("sluice_connections_refused_total{listener=grpc} = %v, want 1", got)
	}
}

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// hold opens a ShouldRateLimit call that sends its headers and never its
// message, until ctx ends.
func hold(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, shouldRateLimit)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// ended waits, 30s at most, for a held call to end, and returns its
// status.
func ended(t *testing.T, cs grpc.ClientStream) *status.Status {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cs.RecvMsg(new(rlspb.RateLimitResponse)) }()
	select {
	case err := <-done:
		return status.Convert(err)
	case <-time.After(30 * time.Second):
		t.Fatal("a held call did not end within 30s")
		return nil
	}
}

// Calls in flight across connections are bounded: past the bound a call
// is refused with UNAVAILABLE at once, and counted; when a held call
// ends, its place is taken again.
func TestGRPCStreamsBounded(t *testing.T) {
	e := start(t, Settings{GRPCMaxStreams: 3, GRPCRecvTimeout: time.Hour})
	e.waitReady(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var held []grpc.ClientStream
	for range 3 {
		held = append(held, hold(t, ctx, e.conn))
	}
	// The held calls are in flight once the server has taken them: wait
	// for the gate to count them.
	deadline := time.Now().Add(30 * time.Second)
	for e.srv.gate.open.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in flight 30s after 3 were opened", e.srv.gate.open.Load())
		}
		time.Sleep(time.Millisecond)
	}
	_, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=ann"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a fourth call: %v, want UNAVAILABLE", err)
	}
	if got := counter(t, e.srv, "sluice_grpc_streams_refused_total"); got != 1 {
		t.Errorf("sluice_grpc_streams_refused_total = %v, want 1", got)
	}
	// Health's Check is a call like any other, refused alike.
	if _, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("health Check past the bound: %v, want UNAVAILABLE", err)
	}
	cancel()
	for _, cs := range held {
		ended(t, cs)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=ann"))
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("a call after the held ones ended: %v", err)
		}
	}
	// A Watch holds its place while open, and gives it back when it ends.
	wctx, stop := context.WithCancel(t.Context())
	watch, err := e.health.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	inFlight := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for e.srv.gate.open.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls in flight after 30s, want %d", e.srv.gate.open.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	inFlight(1)
	stop()
	inFlight(0)
}

// A unary call whose message does not come within GRPCRecvTimeout ends
// with DEADLINE_EXCEEDED; a health Watch, a streaming call, is not
// bounded by it and still delivers the change at shutdown.
func TestGRPCRecvTimeout(t *testing.T) {
	e := start(t, Settings{GRPCRecvTimeout: 300 * time.Millisecond})
	e.waitReady(t)
	watch, err := e.health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := watch.Recv(); err != nil || s.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", s, err)
	}
	// The client gives the call no deadline: a DEADLINE_EXCEEDED is the
	// server's.
	if st := ended(t, hold(t, t.Context(), e.conn)); st.Code() != codes.DeadlineExceeded {
		t.Fatalf("a call that never sends its message ended with %v, want DEADLINE_EXCEEDED", st)
	}
	if resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=ann")); err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("a call that sends its message: %v, %v", resp, err)
	}
	// The Watch, opened before the held call, is still open past the
	// timeout: it reports the shutdown.
	e.cancel()
	s, err := watch.Recv()
	if err != nil || s.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch at shutdown: %v, %v; want NOT_SERVING", s, err)
	}
}
