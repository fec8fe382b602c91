package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testredis"
)

// egControlPlane is go-control-plane's xDS server, what Envoy Gateway's
// control plane serves its rate-limit config with, over mTLS as there.
type egControlPlane struct {
	cache cachev3.SnapshotCache
	addr  string
	mu    sync.Mutex
	nacks []string // their error_detail
}

func startEGControlPlane(t *testing.T, creds credentials.TransportCredentials) *egControlPlane {
	t.Helper()
	cp := &egControlPlane{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	srv := serverv3.NewServer(t.Context(), cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoverypb.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				cp.mu.Lock()
				cp.nacks = append(cp.nacks, req.GetErrorDetail().GetMessage())
				cp.mu.Unlock()
			}
			return nil
		},
	})
	gs := grpc.NewServer(grpc.Creds(creds))
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return cp
}

func (cp *egControlPlane) push(t *testing.T, node, version string, cfgs ...*rlsconfpb.RateLimitConfig) {
	t.Helper()
	res := make([]cachetypes.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]cachetypes.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(t.Context(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (cp *egControlPlane) nacked() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

// egRateLimitConfig is what Envoy Gateway's translator makes of a
// BackendTrafficPolicy with one global rule on a route: the listener's
// domain, the route's descriptor, the rule's, and under it the match's,
// here a distinct one (any value, each counted on its own).
func egRateLimitConfig(perHour uint32, unit rlsconfpb.RateLimitUnit) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{
		Name:   "default/eg/http",
		Domain: "default/eg/http",
		Descriptors: []*rlsconfpb.RateLimitDescriptor{{
			Key: "httproute/default/backend/rule/0/match/0/www_example_com", Value: "httproute/default/backend/rule/0/match/0/www_example_com",
			Descriptors: []*rlsconfpb.RateLimitDescriptor{{
				Key: "default/policy/rule/0", Value: "default/policy/rule/0",
				Descriptors: []*rlsconfpb.RateLimitDescriptor{{
					Key:       "rule-0-match-0",
					RateLimit: &rlsconfpb.RateLimitPolicy{Unit: unit, RequestsPerUnit: perHour},
				}},
			}},
		}},
	}
}

// egRequest is what Envoy sends for that route and a client's x-user-id.
func egRequest(user string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{
			{Key: "httproute/default/backend/rule/0/match/0/www_example_com", Value: "httproute/default/backend/rule/0/match/0/www_example_com"},
			{Key: "default/policy/rule/0", Value: "default/policy/rule/0"},
			{Key: "rule-0-match-0", Value: user},
		},
	}}}
}

// sluice serve with Envoy Gateway's environment, as its ratelimit
// Deployment sets it (ports and file paths aside, which the test picks):
// the config over xDS with mTLS to the control plane, RLS over TLS, a
// real redis-server, statsd to the exporter sidecar's port. It answers
// as the pushed config says, follows an update, and keeps the last good
// config on a bad push, which it NACKs. No Envoy Gateway binary runs
// here: its control plane's library does.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	redisAddr := testredis.Start(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string { return writeFile(t, dir, name, data) }
	// One CA and one certificate, the Secret envoy-rate-limit's: the
	// service's certificate for RLS, and its client certificate to the
	// control plane.
	ca, caKey, caPEM, _ := issue(t, nil, nil, "envoy-gateway CA", true, false)
	_, _, rlCert, rlKey := issue(t, ca, caKey, "envoy-ratelimit", false, false)
	_, _, cpCert, cpKey := issue(t, ca, caKey, "127.0.0.1", false, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cpPair, err := tls.X509KeyPair(cpCert, cpKey)
	if err != nil {
		t.Fatal(err)
	}
	cp := startEGControlPlane(t, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cpPair},
		// The one certificate serves both ends: verify the chain, not
		// its key usage.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		},
	}))
	const node = "envoy-ratelimit"

	// The statsd exporter sidecar: a TCP listener that takes the lines.
	statsd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { statsd.Close() })
	go func() {
		for {
			c, err := statsd.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	_, statsdPort, _ := net.SplitHostPort(statsd.Addr().String())

	env := []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=true", "STATSD_PORT=" + statsdPort,
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + cp.addr,
		"CONFIG_GRPC_XDS_NODE_ID=" + node,
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + write("tls.crt", rlCert),
		"GRPC_SERVER_TLS_KEY=" + write("tls.key", rlKey),
		"GRPC_SERVER_TLS_CA_CERT=" + write("ca.crt", caPEM),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + filepath.Join(dir, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + filepath.Join(dir, "tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + filepath.Join(dir, "ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		// The test's own ports; Envoy Gateway's are the defaults.
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
	}
	c := startChild(t, env)
	if !strings.HasPrefix(c.banner["config"], "xDS "+cp.addr+" as node envoy-ratelimit, mTLS") {
		t.Errorf("banner config %q", c.banner["config"])
	}
	if !strings.Contains(c.log(), "GRPC_SERVER_TLS_CA_CERT=") {
		t.Errorf("the log does not say GRPC_SERVER_TLS_CA_CERT is ignored:\n%s", c.log())
	}

	conn, err := grpc.NewClient(grpcAddr(c), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "envoy-ratelimit"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	ask := func(user string) *rlspb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, egRequest(user))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	run := time.Now().UnixNano() // the Redis windows may hold another run's counts
	probe := 0
	limit := func() uint32 {
		probe++
		return ask(fmt.Sprintf("probe-%d-%d", run, probe)).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	wait := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("after 30s: %s\n%s", what, c.log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}

	// FORCE_START_WITHOUT_INITIAL_CONFIG: ready with no domain.
	if code := httpStatus(t, "http://"+httpAddr(c)+"/healthcheck"); code != http.StatusOK {
		t.Errorf("/healthcheck before the first push: %d, want 200", code)
	}
	if got := limit(); got != 0 {
		t.Errorf("before the first push: limit %d, want none", got)
	}

	cp.push(t, node, "1", egRateLimitConfig(2, rlsconfpb.RateLimitUnit_HOUR))
	wait("the first push in force", func() bool { return limit() == 2 })
	stableWindow(time.Hour, 20*time.Second)
	user := fmt.Sprintf("u%d", run)
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if got := ask(user).GetOverallCode(); got != want {
			t.Errorf("request %d: %v, want %v", i+1, got, want)
		}
	}

	cp.push(t, node, "2", egRateLimitConfig(4, rlsconfpb.RateLimitUnit_HOUR))
	took := wait("the update in force", func() bool { return limit() == 4 })
	t.Logf("the update took effect within %v", took)

	cp.push(t, node, "3", egRateLimitConfig(9, rlsconfpb.RateLimitUnit_UNKNOWN))
	wait("the bad push NACKed", func() bool { return len(cp.nacked()) > 0 })
	if msg := cp.nacked()[0]; !strings.Contains(msg, `unknown unit "UNKNOWN"`) {
		t.Errorf("NACK %q, want the problem", msg)
	}
	if got := limit(); got != 4 {
		t.Errorf("after the bad push: limit %d, want the last good config's 4", got)
	}
	c.stop(t)
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// Envoy Gateway's xDS variables map to the flags; bad values are refused
// at start, naming the variable.
func TestEnvoyXDSVariables(t *testing.T) {
	v, src, out := printed(t, []string{
		"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit",
		"CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,pod=p1", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "authorization:Bearer t",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key",
	})
	for flag, want := range map[string]string{
		"xds": "envoy-gateway:18001", "xds-node-id": "envoy-ratelimit", "xds-node-metadata": "zone=a,pod=p1",
		"xds-headers": "(hidden)", "xds-backoff-initial": "1s", "xds-backoff-max": "5s", "xds-max-msg-size": "8388608",
		"xds-connect-retry": "3s", "xds-backoff-jitter": "true", "xds-tls": "true", "xds-tls-ca": "/certs/ca.crt",
		"xds-tls-cert": "/certs/tls.crt", "xds-tls-key": "/certs/tls.key", "config": `""`,
	} {
		if v[flag] != want {
			t.Errorf("-%s = %q, want %q\n%s", flag, v[flag], want, out)
		}
	}
	if !strings.Contains(src["xds"], "CONFIG_GRPC_XDS_SERVER_URL") {
		t.Errorf("-xds from %q, want CONFIG_GRPC_XDS_SERVER_URL", src["xds"])
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "soon"}, `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="soon": want a positive duration`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2m"}, `XDS_CLIENT_BACKOFF_MAX_INTERVAL="60s" is below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="2m"`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "0s"}, `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL="0s"`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"}, `XDS_CLIENT_BACKOFF_RANDOM_FACTOR="2": want a number from 0 to 1`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER", "maybe"}, `XDS_CLIENT_BACKOFF_JITTER="maybe": want true or false`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1073741824"}, "-xds-max-msg-size 1073741824: at most"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA", "zone"}, `-xds-node-metadata: "zone": want KEY=VALUE pairs`},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c"}, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
	} {
		withEnv(t, tt.env...)
		code, _, stderr := runArgs(t, "serve", "-print-config")
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("env %v: exit %d, stderr %q; want 2 saying %q", tt.env, code, stderr, tt.want)
		}
	}
	// The flags alone.
	withEnv(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", "x.yaml", "-xds", "127.0.0.1:1"}, "-config and -xds: the config comes from one of them"},
		{[]string{"-xds", "127.0.0.1:1", "-xds-tls-ca", "ca.crt"}, "need -xds-tls"},
		{[]string{"-xds", "127.0.0.1:1", "-xds-tls", "-xds-tls-cert", "c.crt"}, "-xds-tls-cert and -xds-tls-key"},
		{[]string{"-xds", "127.0.0.1:1", "-xds-backoff-random-factor", "1.5"}, "-xds-backoff-random-factor 1.5"},
		{[]string{"-xds", "127.0.0.1:1", "-xds-headers", "novalue"}, `-xds-headers: "novalue": want KEY:VALUE pairs`},
	} {
		if code, _, stderr := runServeOwnPorts(t, append([]string{"-print-config"}, tt.args...)...); code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 saying %q", tt.args, code, stderr, tt.want)
		}
	}
	v, _, _ = printed(t, nil, "-xds", "127.0.0.1:1", "-xds-tls", "-xds-tls-ca", "ca.crt")
	if v["xds"] != "127.0.0.1:1" || v["xds-tls"] != "true" || v["xds-tls-ca"] != "ca.crt" {
		t.Errorf("-xds flags: %v", v)
	}
}
