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
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hits_addend is bounded by MaxCost however large MaxHitsAddend is set,
// and descriptors that come to one limit and key cannot add up past it:
// two of 2^63 once summed to 0 and passed uncharged.
func TestHitsAddendBound(t *testing.T) {
	if _, err := New(Settings{Store: newStore(t), MaxHitsAddend: 1 << 63}); err == nil || !strings.Contains(err.Error(), "MaxHitsAddend") {
		t.Errorf("New with MaxHitsAddend 2^63: %v, want an error", err)
	}
	e := start(t, Settings{MaxHitsAddend: MaxCost})
	ctx := t.Context()
	req := withHits(withHits(rlReq("test", 0, "user=ivy", "user=ivy"), 0, MaxCost), 1, MaxCost)
	if _, err := e.rls.ShouldRateLimit(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "more than 2^53") {
		t.Errorf("two descriptors of 2^53 on one key: %v, want InvalidArgument", err)
	}
	// Nothing was charged: the user has all three requests of the minute.
	for i := range 3 {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 1, "user=ivy"))
		if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Fatalf("request %d after the refusal: %v %v, want OK", i+1, resp.GetOverallCode(), err)
		}
	}
	// One descriptor of 2^53 is a request that can never pass, not an error.
	resp, err := e.rls.ShouldRateLimit(ctx, withHits(rlReq("test", 0, "user=jim"), 0, MaxCost))
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("2^53 hits: %v %v, want OVER_LIMIT", resp.GetOverallCode(), err)
	}
}

// rawConn dials addr and sends s, returning the connection.
func rawConn(t *testing.T, addr, s string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedWithin reads c until the server closes it, failing the test if it
// has not within the deadline, and returns what was read.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v (read %q)", d, b)
	}
	return string(b)
}

// A body that stalls, a header that stalls and an idle keep-alive
// connection are each closed, so that slow clients cannot hold
// connections and their buffers.
func TestHTTPTimeouts(t *testing.T) {
	e := start(t, Settings{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(e.base, "http://")
	const deadline = 30 * time.Second // far above the timeouts: only a hang fails

	c := rawConn(t, addr, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"domain\"")
	if out := closedWithin(t, c, deadline); strings.Contains(out, " 200 ") {
		t.Errorf("a stalled body was answered %q", out)
	}
	c = rawConn(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	closedWithin(t, c, deadline)

	c = rawConn(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp := make([]byte, 0, 512)
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(deadline))
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("healthz: %q %v", line, err)
	}
	resp = append(resp, line...)
	c.SetReadDeadline(time.Now().Add(deadline))
	if _, err := io.ReadAll(r); err != nil {
		t.Errorf("an idle keep-alive connection was not closed: %v (after %q)", err, resp)
	}
}

func TestHTTPTimeoutsConfig(t *testing.T) {
	for _, cfg := range []Settings{{ReadTimeout: -1}, {IdleTimeout: -time.Second}} {
		cfg.Store = newStore(t)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("New(%+v): %v, want an error", cfg, err)
		}
	}
}

// h2Conn opens an HTTP/2 connection to the gRPC address and returns its
// framer, after the client preface and an empty SETTINGS frame.
func h2Conn(t *testing.T, e *env) *http2.Framer {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.conn.Target(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// The gRPC server announces its bound on concurrent calls per connection.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	e := start(t, Settings{MaxConcurrentStreams: 7})
	fr := h2Conn(t, e)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS from the server: %v", err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if v, ok := s.Value(http2.SettingMaxConcurrentStreams); !ok || v != 7 {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (%v), want 7", v, ok)
			}
			return
		}
	}
}

// A client that pings far more often than the keepalive policy allows is
// sent GOAWAY ENHANCE_YOUR_CALM and cut off.
func TestGRPCKeepaliveEnforced(t *testing.T) {
	e := start(t, Settings{})
	fr := h2Conn(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go func() {
		for i := 0; ctx.Err() == nil && i < 100; i++ {
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			return
		}
	}
}
