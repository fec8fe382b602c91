package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testredis"
)

// Bad tracing values stop the start, each named: the flags', the
// TRACING_* variables' in envoy mode, and the OpenTelemetry variables'
// when tracing is on.
func TestTracingRefused(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"-tracing-sampling-rate", "2"}, "-tracing-sampling-rate 2: want a number from 0 to 1"},
		{nil, []string{"-tracing-protocol", "udp"}, `-tracing-protocol "udp": want http or grpc`},
		{[]string{"TRACING_ENABLED", "yes"}, nil, `TRACING_ENABLED="yes": want true or false`},
		{[]string{"TRACING_SAMPLING_RATE", "often"}, nil, `TRACING_SAMPLING_RATE="often": want a number from 0 to 1`},
		{[]string{"TRACING_SAMPLING_RATE", "50"}, nil, `TRACING_SAMPLING_RATE="50": want a number from 0 to 1`},
		{[]string{"TRACING_EXPORTER_PROTOCOL", "udp"}, nil, `TRACING_EXPORTER_PROTOCOL="udp": want http or grpc`},
		{[]string{"TRACING_ENABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, nil, `OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": want a URL`},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "//c:4318"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="//c:4318": want a URL`},
		{[]string{"OTEL_EXPORTER_OTLP_INSECURE", "1"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_INSECURE="1": want true or false`},
		{[]string{"OTEL_EXPORTER_OTLP_TIMEOUT", "10s"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_TIMEOUT="10s": want milliseconds`},
		{[]string{"OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_COMPRESSION="GZIP": want gzip or none`},
		{[]string{"OTEL_EXPORTER_OTLP_HEADERS", "api-key"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_HEADERS="api-key": want name=value pairs`},
		{[]string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_CERTIFICATE="/nonexistent/ca.pem": open`},
		{[]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem"}, []string{"-tracing"}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: set both or neither"},
		{[]string{"OTEL_RESOURCE_ATTRIBUTES", "team"}, []string{"-tracing"}, `OTEL_RESOURCE_ATTRIBUTES="team": want name=value pairs`},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, []string{"-tracing"}, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
	} {
		withEnv(t, tt.env...)
		code, _, stderr := runArgs(t, append([]string{"serve", "-print-config"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("env %v, args %v: exit %d, stderr %q; want 2 saying %q", tt.env, tt.args, code, stderr, tt.want)
		}
	}
	// Without tracing, the OpenTelemetry variables configure nothing, and
	// are not read.
	if _, _, out := printed(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}); !strings.Contains(out, "-tracing ") {
		t.Errorf("print-config:\n%s", out)
	}
}

// envoyproxy/ratelimit's TRACING_* variables set the -tracing flags, with
// its defaults; the standard OTEL_EXPORTER_OTLP_PROTOCOL chooses the
// protocol when nothing else does.
func TestTracingEnv(t *testing.T) {
	v, src, _ := printed(t, []string{"TRACING_ENABLED", "true", "TRACING_SERVICE_NAME", "rl", "TRACING_SERVICE_NAMESPACE", "edge",
		"TRACING_SERVICE_INSTANCE_ID", "pod-1", "TRACING_SAMPLING_RATE", "0.5", "TRACING_EXPORTER_PROTOCOL", "gRPC",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"})
	for flag, want := range map[string]string{"tracing": "true", "tracing-service-name": "rl", "tracing-service-namespace": "edge",
		"tracing-service-instance-id": "pod-1", "tracing-sampling-rate": "0.5", "tracing-protocol": "grpc"} {
		if v[flag] != want {
			t.Errorf("-%s = %q, want %q", flag, v[flag], want)
		}
	}
	if src["tracing-sampling-rate"] != "env TRACING_SAMPLING_RATE" || src["tracing-protocol"] != "env TRACING_EXPORTER_PROTOCOL" {
		t.Errorf("sources: %q, %q", src["tracing-sampling-rate"], src["tracing-protocol"])
	}
	v, src, _ = printed(t, []string{"USE_STATSD", "false"})
	for flag, want := range map[string]string{"tracing": "false", "tracing-service-name": "RateLimit", "tracing-sampling-rate": "1", "tracing-protocol": "http"} {
		if v[flag] != want {
			t.Errorf("envoy defaults: -%s = %q, want %q", flag, v[flag], want)
		}
	}
	if src["tracing-service-name"] != "envoy default TRACING_SERVICE_NAME" {
		t.Errorf("-tracing-service-name from %q", src["tracing-service-name"])
	}
	// sluice's own mode: sluice's defaults.
	v, _, _ = printed(t, nil)
	if v["tracing"] != "false" || v["tracing-service-name"] != "sluice" || v["tracing-protocol"] != "http" {
		t.Errorf("defaults: %v", v)
	}
	v, src, _ = printed(t, []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, "-tracing")
	if v["tracing-protocol"] != "grpc" || src["tracing-protocol"] != "env OTEL_EXPORTER_OTLP_PROTOCOL" {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: -tracing-protocol %q from %q", v["tracing-protocol"], src["tracing-protocol"])
	}
	v, _, _ = printed(t, []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, "-tracing")
	if v["tracing-protocol"] != "http" {
		t.Errorf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf: -tracing-protocol %q, want the per-signal variable's http", v["tracing-protocol"])
	}
	v, _, _ = printed(t, []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, "-tracing", "-tracing-protocol", "http")
	if v["tracing-protocol"] != "http" {
		t.Errorf("-tracing-protocol http: %q, want the flag's", v["tracing-protocol"])
	}
}

// otlpHTTP is an OTLP receiver over HTTP with protobuf: it keeps each
// span's trace, parent and service.
type otlpHTTP struct {
	mu    sync.Mutex
	spans []string // "service trace parent name"
}

func (o *otlpHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "want OTLP/HTTP protobuf at /v1/traces", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				o.spans = append(o.spans, strings.Join([]string{service, hex.EncodeToString(sp.GetTraceId()),
					hex.EncodeToString(sp.GetParentSpanId()), sp.GetName()}, " "))
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (o *otlpHTTP) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.spans...)
}

// sluice serve with envoyproxy/ratelimit's environment and its TRACING_*
// variables, pointed at a collector by OTEL_EXPORTER_OTLP_ENDPOINT as
// Envoy Gateway points it, traces a request that carries a traceparent
// under the caller's span, and has sent the spans when it has stopped.
func TestTracingEnvoyRun(t *testing.T) {
	redisAddr := testredis.Start(t)
	root := t.TempDir()
	current := writeRuntime(t, root, "v1", map[string]string{"config.yaml": envoyRunV1})

	rc := &otlpHTTP{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rc}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	c := startChild(t, []string{
		"RUNTIME_ROOT=" + current, "RUNTIME_SUBDIRECTORY=ratelimit",
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "USE_STATSD=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"TRACING_ENABLED=true", "TRACING_SERVICE_NAME=envoy-ratelimit",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + l.Addr().String(),
	})
	if !strings.Contains(c.banner["tracing"], "OTLP over http to http://"+l.Addr().String()+"/v1/traces") {
		t.Errorf("banner: %v", c.banner)
	}
	conn, err := grpc.NewClient(grpcAddr(c), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parent+"-01")
	req := &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "trace-" + filepath.Base(root)}}}}}
	if resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v", resp, err)
	}
	// The graceful stop sends what the batch has not yet.
	c.stop(t)
	want := "envoy-ratelimit " + traceID + " " + parent + " sluice.decide"
	got := rc.received()
	found := false
	for _, s := range got {
		found = found || s == want
	}
	if !found {
		t.Errorf("the collector got %q once sluice serve stopped; want %q", got, want)
	}
}
