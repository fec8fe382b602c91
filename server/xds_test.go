package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

const xdsNode = "sluice-test"

// controlPlane is go-control-plane's xDS server, the library Envoy
// Gateway's control plane is made of, serving RateLimitConfig snapshots
// from its snapshot cache, and recording what the clients answer.
type controlPlane struct {
	t     *testing.T
	cache cachev3.SnapshotCache
	opts  []grpc.ServerOption
	addr  string

	mu    sync.Mutex
	gs    *grpc.Server
	acks  []string // versions acknowledged
	nacks []*discoverypb.DiscoveryRequest
	opens int // first requests of a stream
}

// startControlPlane serves on a free loopback port until the test ends.
func startControlPlane(t *testing.T, opts ...grpc.ServerOption) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), opts: opts}
	ln := listen(t)
	cp.addr = ln.Addr().String()
	cp.serve(ln)
	t.Cleanup(cp.stop)
	return cp
}

func (cp *controlPlane) serve(ln net.Listener) {
	srv := serverv3.NewServer(cp.t.Context(), cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoverypb.DiscoveryRequest) error {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			switch {
			case req.GetErrorDetail() != nil:
				cp.nacks = append(cp.nacks, req)
			case req.GetResponseNonce() != "":
				cp.acks = append(cp.acks, req.GetVersionInfo())
			default:
				cp.opens++
			}
			return nil
		},
	})
	gs := grpc.NewServer(cp.opts...)
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	cp.mu.Lock()
	cp.gs = gs
	cp.mu.Unlock()
	go gs.Serve(ln)
}

// stop stops the control plane, closing its streams.
func (cp *controlPlane) stop() {
	cp.mu.Lock()
	gs := cp.gs
	cp.mu.Unlock()
	gs.Stop()
}

// restart serves again on the same address, with the same cache.
func (cp *controlPlane) restart() {
	cp.t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for ln, err = net.Listen("tcp", cp.addr); err != nil; ln, err = net.Listen("tcp", cp.addr) {
		if time.Now().After(deadline) {
			cp.t.Fatalf("the control plane's address %s: %v", cp.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cp.serve(ln)
}

// push sets the node's snapshot to version, holding cfgs.
func (cp *controlPlane) push(version string, cfgs ...*rlsconfpb.RateLimitConfig) {
	cp.t.Helper()
	res := make([]cachetypes.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]cachetypes.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(cp.t.Context(), xdsNode, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// nacked returns the NACKs received so far.
func (cp *controlPlane) nacked() []*discoverypb.DiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*discoverypb.DiscoveryRequest(nil), cp.nacks...)
}

func (cp *controlPlane) acked(version string) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, v := range cp.acks {
		if v == version {
			return true
		}
	}
	return false
}

// shopConfig is a RateLimitConfig of domain, as Envoy Gateway's
// translator writes one: a route's descriptor, and under it a rule's.
func shopConfig(domain string, perMinute uint32) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{
		Name:   domain,
		Domain: domain,
		Descriptors: []*rlsconfpb.RateLimitDescriptor{{
			Key: "user",
			RateLimit: &rlsconfpb.RateLimitPolicy{
				Unit:            rlsconfpb.RateLimitUnit_MINUTE,
				RequestsPerUnit: perMinute,
			},
		}},
	}
}

// waitFor polls cond until it holds, for 30s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// probes numbers limitIn's users, so that no probe spends another's
// quota.
var probes atomic.Int64

// limitIn is the limit the server applies to a user's descriptor in
// domain: its requests per unit, 0 for none (an unknown domain). Each
// call is a user of its own.
func limitIn(t *testing.T, s *Server, domain string) uint32 {
	t.Helper()
	resp, err := s.ShouldRateLimit(t.Context(), rlReq(domain, 0, "user=probe-"+strconv.FormatInt(probes.Add(1), 10)))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// fastXDS reconnects within tens of milliseconds, for the tests.
func fastXDS(addr string) *XDS {
	return &XDS{Addr: addr, NodeID: xdsNode, ConnectRetry: 20 * time.Millisecond,
		Backoff: &XDSBackoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, RandomFactor: 0.5, Jitter: true}}
}

// A server fed by a control plane: not ready until the first push; each
// push takes effect, a bad one is NACKed with its errors while the last
// good config keeps limiting, a withdrawn resource takes its domain
// along, and the server connects again to a control plane that restarted.
func TestXDS(t *testing.T) {
	cp := startControlPlane(t)
	e := start(t, Settings{XDS: fastXDS(cp.addr)})
	s := e.srv

	// No config yet: not ready, no domain.
	if code, _, _ := get(t, e.base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first push: /readyz %d, want 503", code)
	}
	if code, _, _ := get(t, e.base+"/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("before the first push: /healthcheck %d, want 500", code)
	}
	if resp, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("before the first push: gRPC health %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
	if got := limitIn(t, s, "shop"); got != 0 {
		t.Errorf("before the first push: limit %d, want none", got)
	}

	cp.push("v1", shopConfig("shop", 2))
	e.waitReady(t)
	waitFor(t, "v1's limit of 2 in force", func() bool { return limitIn(t, s, "shop") == 2 })
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.ShouldRateLimit(t.Context(), rlReq("shop", 0, "user=alice"))
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("request %d under v1: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	waitFor(t, "v1 acknowledged", func() bool { return cp.acked("v1") })

	// An update takes effect.
	cp.push("v2", shopConfig("shop", 5))
	waitFor(t, "v2's limit of 5 in force", func() bool { return limitIn(t, s, "shop") == 5 })
	if v := s.cur.Load().version; v != "v2" {
		t.Errorf("version in force %q, want v2", v)
	}

	// A bad push is NACKed with its errors; v2 keeps limiting.
	bad := shopConfig("shop", 9)
	bad.Descriptors[0].RateLimit.Unit = rlsconfpb.RateLimitUnit_UNKNOWN
	cp.push("v3", bad)
	waitFor(t, "v3 NACKed", func() bool { return len(cp.nacked()) > 0 })
	n := cp.nacked()[0]
	if msg := n.GetErrorDetail().GetMessage(); !strings.Contains(msg, `xDS resource "shop": descriptors[0].rate_limit.unit: unknown unit "UNKNOWN"`) {
		t.Errorf("NACK's error_detail %q, want the resource, field and problem", msg)
	}
	if n.GetVersionInfo() != "v2" {
		t.Errorf("NACK's version_info %q, want v2, the version in force", n.GetVersionInfo())
	}
	if got := limitIn(t, s, "shop"); got != 5 {
		t.Errorf("after the bad push: limit %d, want v2's 5", got)
	}
	if v := s.cur.Load().version; v != "v2" {
		t.Errorf("after the bad push: version in force %q, want v2", v)
	}
	if got := counter(t, s, "sluice_config_reloads_total", "result", "failure"); got < 1 {
		t.Errorf("reloads failed %v, want at least 1", got)
	}

	// Two domains, then one withdrawn.
	cp.push("v4", shopConfig("shop", 5), shopConfig("books", 3))
	waitFor(t, "v4's books domain", func() bool { return limitIn(t, s, "books") == 3 })
	cp.push("v5", shopConfig("shop", 5))
	waitFor(t, "books withdrawn", func() bool { return strings.Join(s.Domains(), ",") == "shop" })
	if got := limitIn(t, s, "books"); got != 0 {
		t.Errorf("books withdrawn: limit %d, want none", got)
	}

	// The control plane goes away: v5 keeps serving; it comes back on
	// the same address with a new version, which takes effect.
	cp.stop()
	if got := limitIn(t, s, "shop"); got != 5 {
		t.Errorf("control plane down: limit %d, want 5", got)
	}
	cp.push("v6", shopConfig("shop", 7))
	cp.restart()
	waitFor(t, "v6 after the control plane restarted", func() bool { return limitIn(t, s, "shop") == 7 })
	if !e.srv.ready.Load() {
		t.Error("not ready after the reconnection")
	}
}

// With StartWithoutConfig the server is ready before any push, serving no
// domain.
func TestXDSStartWithoutConfig(t *testing.T) {
	cp := startControlPlane(t)
	e := start(t, Settings{XDS: fastXDS(cp.addr), StartWithoutConfig: true, HealthRequiresConfig: true})
	e.waitReady(t)
	if code, _, _ := get(t, e.base+"/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("no domain under HealthRequiresConfig: /healthcheck %d, want 500", code)
	}
	cp.push("v1", shopConfig("shop", 2))
	waitFor(t, "v1 in force", func() bool { return limitIn(t, e.srv, "shop") == 2 })
	if code, _, _ := get(t, e.base+"/healthcheck"); code != http.StatusOK {
		t.Errorf("with a domain: /healthcheck %d, want 200", code)
	}
}

// The console's policy view names the control plane and the version in
// force.
func TestXDSPolicyView(t *testing.T) {
	cp := startControlPlane(t)
	e := start(t, Settings{XDS: fastXDS(cp.addr)})
	cp.push("2024-01-01T00:00:00Z/17", shopConfig("shop", 2))
	waitFor(t, "the push in force", func() bool { return limitIn(t, e.srv, "shop") == 2 })
	ln := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.srv.ServeAdmin(ctx, ln, AdminOptions{}) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	code, _, body := get(t, "http://"+ln.Addr().String()+"/v1/policy")
	var p struct {
		Source     []string `json:"source"`
		XDSVersion string   `json:"xds_version"`
	}
	if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/policy: %d, %v: %s", code, err, body)
	}
	if len(p.Source) != 1 || p.Source[0] != "xDS "+cp.addr || p.XDSVersion != "2024-01-01T00:00:00Z/17" {
		t.Errorf("GET /v1/policy: source %q, xds_version %q; want the control plane and the version", p.Source, p.XDSVersion)
	}
}

// Resources that do not load are refused whole, each problem named; the
// server never serves part of a push.
func TestXDSBadPushes(t *testing.T) {
	s, _ := newServer(t, Settings{XDS: fastXDS("127.0.0.1:1")})
	good, _ := anypb.New(shopConfig("shop", 2))
	unknown, _ := anypb.New(shopConfig("extra", 2))
	// Field 99 of the RateLimitConfig: a newer proto's.
	unknown.Value = protowire.AppendTag(unknown.Value, 99, protowire.VarintType)
	unknown.Value = protowire.AppendVarint(unknown.Value, 1)
	other, _ := anypb.New(&discoverypb.DiscoveryRequest{})
	dup, _ := anypb.New(shopConfig("shop", 3))
	for _, tt := range []struct {
		name string
		res  []*anypb.Any
		want string
	}{
		{"a newer proto's field", []*anypb.Any{good, unknown}, `xDS resource "extra": (field 99): a field this server does not know`},
		{"another type", []*anypb.Any{good, other}, "resource 1 is a \"type.googleapis.com/envoy.service.discovery.v3.DiscoveryRequest\""},
		{"a domain twice", []*anypb.Any{good, dup}, `"shop" is already defined`},
	} {
		resp := &discoverypb.DiscoveryResponse{VersionInfo: "v", TypeUrl: rateLimitConfigType, Resources: tt.res}
		err := s.applyXDS(t.Context(), resp)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if len(s.Domains()) != 0 {
			t.Errorf("%s: domains %q served, want none", tt.name, s.Domains())
		}
	}
	many := make([]*anypb.Any, MaxXDSResources+1)
	for i := range many {
		many[i] = good
	}
	if err := s.applyXDS(t.Context(), &discoverypb.DiscoveryResponse{TypeUrl: rateLimitConfigType, Resources: many}); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("%d resources: %v, want refused", len(many), err)
	}
	if err := s.applyXDS(t.Context(), &discoverypb.DiscoveryResponse{TypeUrl: rateLimitConfigType, Resources: []*anypb.Any{good}}); err != nil {
		t.Errorf("a good push after the bad: %v", err)
	}
}

// The control plane over mTLS: a server with its client certificate gets
// the config, and one without is refused by the control plane.
func TestXDSMTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := newCA(t, "test CA")
	srvCert, srvKey := ca.issue(t, 2, false, "envoy-gateway")
	cliCert, cliKey := ca.issue(t, 3, true, "envoy-ratelimit")
	caPEM := ca.pem
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	kp, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	cp := startControlPlane(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{kp}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})))
	cp.push("v1", shopConfig("shop", 4))

	x := fastXDS(cp.addr)
	x.TLS = &XDSTLS{CAFile: write("ca.crt", caPEM), CertFile: write("tls.crt", cliCert), KeyFile: write("tls.key", cliKey), ServerName: "envoy-gateway"}
	e := start(t, Settings{XDS: x})
	waitFor(t, "the push over mTLS in force", func() bool { return limitIn(t, e.srv, "shop") == 4 })

	// Without a client certificate the handshake fails: no config.
	x2 := fastXDS(cp.addr)
	x2.TLS = &XDSTLS{CAFile: x.TLS.CAFile, ServerName: "envoy-gateway"}
	s2, _ := newServer(t, Settings{XDS: x2})
	c := newXDSClient(s2, s2.cfg.XDS)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if answered, err := c.stream(ctx); answered || err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("without a client certificate: answered %v, %v; want refused", answered, err)
	}

	// Files that do not load are refused at New, naming the file.
	x3 := fastXDS(cp.addr)
	x3.TLS = &XDSTLS{CAFile: filepath.Join(dir, "missing.crt")}
	if _, err := New(Settings{XDS: x3, Store: newStore(t)}); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("a missing CA file: %v, want an error naming it", err)
	}
}

// A push past XDS.MaxMessageBytes is refused by gRPC before it is read:
// the stream ends, and the client connects again, serving nothing.
func TestXDSMaxMessageBytes(t *testing.T) {
	cp := startControlPlane(t)
	cp.push("v1", shopConfig("shop", 2))
	x := fastXDS(cp.addr)
	x.MaxMessageBytes = 64
	e := start(t, Settings{XDS: x})
	waitFor(t, "the client connecting again", func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return cp.opens >= 2
	})
	if len(e.srv.Domains()) != 0 || e.srv.ready.Load() || cp.acked("v1") {
		t.Errorf("a push past MaxMessageBytes: domains %q, ready %v, acked %v; want none, not ready, not acked", e.srv.Domains(), e.srv.ready.Load(), cp.acked("v1"))
	}
}

// Settings.XDS out of range is refused at New.
func TestXDSSettings(t *testing.T) {
	for _, tt := range []struct {
		x    XDS
		want string
	}{
		{XDS{}, "XDS.Addr"},
		{XDS{Addr: "a:1", MaxMessageBytes: MaxXDSMessageBytes + 1}, "XDS.MaxMessageBytes"},
		{XDS{Addr: "a:1", Backoff: &XDSBackoff{Initial: time.Second, Max: time.Millisecond}}, "XDS.Backoff"},
		{XDS{Addr: "a:1", Backoff: &XDSBackoff{Initial: time.Second, Max: time.Second, RandomFactor: 2}}, "RandomFactor"},
		{XDS{Addr: "a:1", TLS: &XDSTLS{CertFile: "c"}}, "CertFile and KeyFile"},
	} {
		if _, err := New(Settings{XDS: &tt.x, Store: newStore(t)}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.x, err, tt.want)
		}
	}
	if _, err := New(Settings{XDS: &XDS{Addr: "a:1"}, Paths: []string{"x.yaml"}, Store: newStore(t)}); err == nil {
		t.Error("XDS with Paths: accepted, want refused")
	}
}

// unversionedADS answers every request on its stream at once with the
// same push, which has no version: what a control plane without versions
// does after a NACK.
type unversionedADS struct {
	discoverypb.UnimplementedAggregatedDiscoveryServiceServer
	push  *discoverypb.DiscoveryResponse
	nacks atomic.Int64
}

func (a *unversionedADS) StreamAggregatedResources(st discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		if req.GetErrorDetail() != nil {
			a.nacks.Add(1)
		}
		if err := st.Send(a.push); err != nil {
			return err
		}
	}
}

// A bad push without a version, sent again at once after each NACK, is
// NACKed at most once each ConnectRetry: the client does not spin.
func TestXDSUnversionedBadPushPaced(t *testing.T) {
	bad, _ := anypb.New(&discoverypb.DiscoveryRequest{})
	ads := &unversionedADS{push: &discoverypb.DiscoveryResponse{TypeUrl: rateLimitConfigType, Resources: []*anypb.Any{bad}}}
	gs := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, ads)
	ln := listen(t)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	x := fastXDS(ln.Addr().String())
	x.ConnectRetry = 100 * time.Millisecond
	e := start(t, Settings{XDS: x})
	waitFor(t, "a NACK", func() bool { return ads.nacks.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if n := ads.nacks.Load(); n > 10 {
		t.Errorf("%d NACKs in half a second with ConnectRetry 100ms: the client spins", n)
	}
	if len(e.srv.Domains()) != 0 {
		t.Errorf("domains %q, want none", e.srv.Domains())
	}
}
