package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/memory"
)

// t0 is 10s into a minute: a per-minute fixed window resets 50s later.
var t0 = time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)

// testYAML exercises every feature of the RLS answer.
const testYAML = `domain: test
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /free
    rate_limit:
      unlimited: true
  - key: org
    descriptors:
      - key: user
        rate_limit:
          name: org_user
          unit: second
          requests_per_unit: 2
  - key: trial
    shadow_mode: true
    rate_limit:
      name: trial
      unit: minute
      requests_per_unit: 1
  - key: plan
    value: premium
    rate_limit:
      name: premium
      replaces:
        - name: per_user
      unit: minute
      requests_per_unit: 100
  - key: bucket
    rate_limit:
      name: bucket
      algorithm: token_bucket
      period: 10s
      requests_per_unit: 5
      burst: 10
  - key: ip
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 1000
forward_auth:
  proxy: nginx
  deny_status: 429
  descriptors:
    - entries:
        - key: user
          from: header:X-User
    - entries:
        - key: ip
          from: client_ip
`

// testClock is a clock the test moves.
type testClock = testclock.Clock

func newClock() *testClock { return testclock.New(t0) }

// writeFile writes a config file and returns its path.
func writeFile(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// newStore is a memory store without its sweeper goroutine.
func newStore(t testing.TB) *memory.Store {
	t.Helper()
	st, err := memory.New(memory.WithSweepInterval(0), memory.WithMaxKeys(1<<12))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newServer makes a Server on testYAML (unless cfg names files) with a
// memory store and the test clock.
func newServer(t testing.TB, cfg Settings) (*Server, *testClock) {
	t.Helper()
	clock := newClock()
	if len(cfg.Paths) == 0 && cfg.Policy == nil && cfg.XDS == nil {
		cfg.Paths = []string{writeFile(t, t.TempDir(), "test.yaml", testYAML)}
	}
	if cfg.Store == nil {
		cfg.Store = newStore(t)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

// env is a server running on loopback listeners, with clients.
type env struct {
	srv    *Server
	clock  *testClock
	conn   *grpc.ClientConn
	rls    rlspb.RateLimitServiceClient
	health healthpb.HealthClient
	base   string // http://127.0.0.1:PORT
	cancel context.CancelFunc
	done   chan error
}

// start runs a server for cfg (see newServer) until the test ends, and
// checks then that Serve returned nil.
func start(t *testing.T, cfg Settings) *env {
	t.Helper()
	srv, clock := newServer(t, cfg)
	return serve(t, srv, clock)
}

// listen returns a listener on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func serve(t *testing.T, srv *Server, clock *testClock) *env {
	t.Helper()
	hl, gl := listen(t), listen(t)
	var err error
	ctx, cancel := context.WithCancel(t.Context())
	e := &env{srv: srv, clock: clock, base: "http://" + hl.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- srv.Serve(ctx, hl, gl) }()
	e.conn, err = grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.rls = rlspb.NewRateLimitServiceClient(e.conn)
	e.health = healthpb.NewHealthClient(e.conn)
	t.Cleanup(func() {
		e.conn.Close()
		e.stop(t)
	})
	return e
}

// waitReady waits, 30s at most, until Serve has reported the server
// ready, to /readyz and to gRPC health: Serve runs on a goroutine of its
// own, which a loaded machine may not have run that far when start
// returns, though the listeners already take connections.
func (e *env) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := e.srv.ready.Load()
		for _, svc := range []string{"", rlsService} {
			resp, err := e.srv.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
			ready = ready && err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the server is not ready 30s after Serve began")
		}
		time.Sleep(time.Millisecond)
	}
}

// stop shuts the server down and checks that Serve returned nil, within
// a minute. It may be called more than once.
func (e *env) stop(t *testing.T) {
	t.Helper()
	e.cancel()
	select {
	case err, ok := <-e.done:
		if ok {
			close(e.done)
			if err != nil {
				t.Errorf("Serve = %v, want nil", err)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return within a minute of its context's end")
	}
}

// rlReq builds a request; each descriptor is "k=v,k2=v2" ("k" alone for
// an empty value).
func rlReq(domain string, hits uint32, descs ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descs {
		var es []*ratelimitpb.RateLimitDescriptor_Entry
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			es = append(es, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, &ratelimitpb.RateLimitDescriptor{Entries: es})
	}
	return r
}

// withHits sets descriptor i's own hits_addend.
func withHits(r *rlspb.RateLimitRequest, i int, h uint64) *rlspb.RateLimitRequest {
	r.Descriptors[i].HitsAddend = wrapperspb.UInt64(h)
	return r
}

// header returns the value of a response_headers_to_add entry.
func header(resp *rlspb.RateLimitResponse, key string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == key {
			return h.GetValue()
		}
	}
	return ""
}

// counter returns the value of a counter of the server's metrics with the
// given labels (name=value pairs), 0 if it has no such series.
func counter(t *testing.T, s *Server, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k {
			return l.GetValue() == v
		}
	}
	return false
}

// get does an HTTP GET and returns the status, headers and body.
func get(t *testing.T, url string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// logBuffer is a slog.Logger into a buffer the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
