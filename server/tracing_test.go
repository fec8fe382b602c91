package server

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP trace receiver of the test's own, over gRPC or over
// HTTP with protobuf, as a collector is: it keeps every span it is sent.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	endpoint string // OTEL_EXPORTER_OTLP_ENDPOINT's value for it
	mu       sync.Mutex
	spans    []gotSpan
}

// gotSpan is a span as the receiver got it, its IDs in hex.
type gotSpan struct {
	service, namespace, instance string // the resource's
	name                         string
	traceID, spanID, parentID    string
	attrs                        map[string]string
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, gotSpan{
					service: res["service.name"], namespace: res["service.namespace"], instance: res["service.instance.id"],
					name:    sp.GetName(),
					traceID: hex.EncodeToString(sp.GetTraceId()), spanID: hex.EncodeToString(sp.GetSpanId()),
					parentID: hex.EncodeToString(sp.GetParentSpanId()),
					attrs:    attrMap(sp.GetAttributes()),
				})
			}
		}
	}
}

// attrMap is a span's or a resource's attributes as strings.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// all is every span received so far.
func (r *receiver) all() []gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...)
}

// wait waits, 30s at most, until the receiver holds n spans of the trace,
// and returns them.
func (r *receiver) wait(t *testing.T, traceID string, n int) []gotSpan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var in []gotSpan
		for _, s := range r.all() {
			if s.traceID == traceID {
				in = append(in, s)
			}
		}
		if len(in) >= n {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d spans of trace %s 30s on, want %d; all it holds: %+v", len(in), traceID, n, r.all())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startReceiver runs a receiver over protocol (TracingGRPC or
// TracingHTTP) on a free loopback port until the test ends.
func startReceiver(t *testing.T, protocol string) *receiver {
	t.Helper()
	r := &receiver{}
	l := listen(t)
	r.endpoint = "http://" + l.Addr().String()
	switch protocol {
	case TracingGRPC:
		gs := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(gs, r)
		go gs.Serve(l)
		t.Cleanup(gs.Stop)
	case TracingHTTP:
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
				http.NotFound(w, req)
				return
			}
			var body io.Reader = req.Body
			if req.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(req.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				body = zr
			}
			b, err := io.ReadAll(body)
			var m coltracepb.ExportTraceServiceRequest
			if err == nil {
				err = proto.Unmarshal(b, &m)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.add(&m)
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(out)
		})}
		go hs.Serve(l)
		t.Cleanup(func() { hs.Close() })
	default:
		t.Fatalf("protocol %q", protocol)
	}
	return r
}

// exportTo points the OTLP exporter of the servers the test starts at r,
// with the spans sent as soon as they end unless delay says otherwise.
func exportTo(t *testing.T, r *receiver, delay time.Duration) {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", strconv.FormatInt(delay.Milliseconds(), 10))
}

// newTraceID and newSpanID are random IDs in hex, as a caller's tracer
// makes them.
func newTraceID(t *testing.T) string { return randomHex(t, 16) }
func newSpanID(t *testing.T) string  { return randomHex(t, 8) }

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// decisionAndStore finds the decision's span and its store's among spans,
// and checks how they hang together: the decision under parent, the
// store's under the decision's, both with the service's resource.
func decisionAndStore(t *testing.T, spans []gotSpan, parent, service string) (decision, store gotSpan) {
	t.Helper()
	for _, s := range spans {
		switch s.name {
		case "sluice.decide":
			decision = s
		case "sluice.store.take":
			store = s
		}
	}
	if decision.spanID == "" || store.spanID == "" {
		t.Fatalf("spans %+v: want a sluice.decide and a sluice.store.take", spans)
	}
	if decision.parentID != parent {
		t.Errorf("the decision's parent is %q, want the caller's span %q", decision.parentID, parent)
	}
	if store.parentID != decision.spanID {
		t.Errorf("the store's span's parent is %q, want the decision's %q", store.parentID, decision.spanID)
	}
	for _, s := range []gotSpan{decision, store} {
		if s.service != service {
			t.Errorf("span %s: service.name %q, want %q", s.name, s.service, service)
		}
	}
	return decision, store
}

// A request that carries the caller's trace context, W3C or B3, over
// gRPC, POST /json or forward auth, is traced under the caller's span:
// the decision's span, with the domain, the descriptors and the outcome,
// and the store's under it, sent over OTLP by gRPC and by HTTP to a
// receiver, with the configured resource.
func TestTracingContinuesTheCallersTrace(t *testing.T) {
	for _, protocol := range []string{TracingGRPC, TracingHTTP} {
		t.Run(protocol, func(t *testing.T) {
			rc := startReceiver(t, protocol)
			exportTo(t, rc, 10*time.Millisecond)
			e := start(t, Settings{Tracing: &Tracing{ServiceName: "rl-test", ServiceNamespace: "edge", ServiceInstanceID: "pod-7", Protocol: protocol}})
			e.waitReady(t)

			type call struct {
				name     string
				endpoint string
				do       func(traceID, spanID string)
			}
			viaGRPC := func(kv ...string) {
				ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
				if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=alice")); err != nil {
					t.Fatal(err)
				}
			}
			viaHTTP := func(method, path, body string, kv ...string) {
				req, err := http.NewRequestWithContext(t.Context(), method, e.base+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+1 < len(kv); i += 2 {
					req.Header.Set(kv[i], kv[i+1])
				}
				if code, _, got := do(t, req); code != http.StatusOK {
					t.Fatalf("%s %s: %d %s", method, path, code, got)
				}
			}
			const jsonBody = `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}`
			auth := []string{"X-Real-IP", "203.0.113.9", "X-Original-URI", "/orders", "X-User", "carol"}
			for _, c := range []call{
				{"gRPC traceparent", "grpc", func(tr, sp string) { viaGRPC("traceparent", "00-"+tr+"-"+sp+"-01") }},
				{"gRPC b3", "grpc", func(tr, sp string) { viaGRPC("b3", tr+"-"+sp+"-1") }},
				{"json traceparent", "json", func(tr, sp string) { viaHTTP(http.MethodPost, "/json", jsonBody, "traceparent", "00-"+tr+"-"+sp+"-01") }},
				{"json X-B3", "json", func(tr, sp string) {
					viaHTTP(http.MethodPost, "/json", jsonBody, "X-B3-TraceId", tr, "X-B3-SpanId", sp, "X-B3-Sampled", "1")
				}},
				{"auth traceparent", "auth", func(tr, sp string) {
					viaHTTP(http.MethodGet, "/v1/auth", "", append([]string{"traceparent", "00-" + tr + "-" + sp + "-01"}, auth...)...)
				}},
				{"auth b3", "auth", func(tr, sp string) {
					viaHTTP(http.MethodGet, "/v1/auth", "", append([]string{"b3", tr + "-" + sp + "-1"}, auth...)...)
				}},
			} {
				traceID, spanID := newTraceID(t), newSpanID(t)
				c.do(traceID, spanID)
				d, st := decisionAndStore(t, rc.wait(t, traceID, 2), spanID, "rl-test")
				wantDescs := "1"
				if c.endpoint == "auth" {
					wantDescs = "2" // the forward_auth section's two descriptors
				}
				want := map[string]string{"ratelimit.domain": "test", "ratelimit.descriptors": wantDescs, "ratelimit.outcome": "OK", "sluice.endpoint": c.endpoint}
				for k, v := range want {
					if d.attrs[k] != v {
						t.Errorf("%s: the decision's %s = %q, want %q", c.name, k, d.attrs[k], v)
					}
				}
				if st.attrs["sluice.store"] != "main" || st.attrs["sluice.store.checks"] != wantDescs {
					t.Errorf("%s: the store's span's attributes %v", c.name, st.attrs)
				}
				if d.namespace != "edge" || d.instance != "pod-7" {
					t.Errorf("%s: service.namespace %q, service.instance.id %q; want edge, pod-7", c.name, d.namespace, d.instance)
				}
			}
		})
	}
}

// A denial is the decision span's outcome.
func TestTracingOverLimit(t *testing.T) {
	rc := startReceiver(t, TracingHTTP)
	exportTo(t, rc, 10*time.Millisecond)
	e := start(t, Settings{Tracing: &Tracing{}})
	var d gotSpan
	for range 4 { // per_user allows 3 a minute
		traceID, spanID := newTraceID(t), newSpanID(t)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-"+spanID+"-01")
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=dave")); err != nil {
			t.Fatal(err)
		}
		d, _ = decisionAndStore(t, rc.wait(t, traceID, 2), spanID, DefaultTracingServiceName)
	}
	if d.attrs["ratelimit.outcome"] != "OVER_LIMIT" {
		t.Errorf("the fourth request's outcome %q, want OVER_LIMIT", d.attrs["ratelimit.outcome"])
	}
	if d.instance == "" {
		t.Error("no service.instance.id: want a random one")
	}
}

// Forward auth believes a trace context only from a trusted proxy, as it
// does the proxy's other headers: from any other peer the request starts
// a trace of its own, while POST /json continues its caller's.
func TestTracingAuthSpoofed(t *testing.T) {
	rc := startReceiver(t, TracingHTTP)
	exportTo(t, rc, 10*time.Millisecond)
	e := start(t, Settings{Tracing: &Tracing{SamplingRate: 1}, TrustedProxies: []netip.Prefix{}})
	traceID, spanID := newTraceID(t), newSpanID(t)
	code, _, body := get(t, e.base+"/v1/auth", "traceparent", "00-"+traceID+"-"+spanID+"-01", "X-User", "mallory")
	if code != http.StatusOK {
		t.Fatalf("/v1/auth: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var root *gotSpan
		for _, s := range rc.all() {
			if s.name == "sluice.decide" && s.attrs["sluice.endpoint"] == "auth" {
				root = &s
			}
		}
		if root != nil {
			if root.traceID == traceID || root.parentID != "" {
				t.Errorf("an untrusted peer's traceparent was believed: the decision's span is in trace %s under %q", root.traceID, root.parentID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision span of forward auth 30s on: %+v", rc.all())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The same peer's POST /json is its caller's own, and continued.
	traceID, spanID = newTraceID(t), newSpanID(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"erin"}]}]}`))
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	if code, _, body := do(t, req); code != http.StatusOK {
		t.Fatalf("/json: %d %s", code, body)
	}
	decisionAndStore(t, rc.wait(t, traceID, 2), spanID, DefaultTracingServiceName)
}

// Sampling follows the caller: with a sampling rate of 0, a request whose
// caller sampled is traced, one whose caller did not is not, and one
// without a trace context starts none. The spans still buffered when the
// server stops are sent before Serve returns.
func TestTracingSampledByParentAndFlushedAtStop(t *testing.T) {
	rc := startReceiver(t, TracingGRPC)
	exportTo(t, rc, time.Hour) // nothing is sent before the stop
	e := start(t, Settings{Tracing: &Tracing{Protocol: TracingGRPC}})
	ask := func(kv ...string) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
		if _, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=frank")); err != nil {
			t.Fatal(err)
		}
	}
	sampled, spanID := newTraceID(t), newSpanID(t)
	ask()
	ask("traceparent", "00-"+newTraceID(t)+"-"+newSpanID(t)+"-00")
	ask("traceparent", "00-"+sampled+"-"+spanID+"-01")
	if got := rc.all(); len(got) != 0 {
		t.Fatalf("spans sent before the stop: %+v", got)
	}
	e.stop(t)
	got := rc.all()
	if len(got) != 2 {
		t.Fatalf("after the stop the receiver holds %+v; want the sampled request's two spans", got)
	}
	decisionAndStore(t, got, spanID, DefaultTracingServiceName)
	for _, s := range got {
		if s.traceID != sampled {
			t.Errorf("span %s of trace %s, want only the sampled trace %s", s.name, s.traceID, sampled)
		}
	}
}

func TestTracingSettings(t *testing.T) {
	for _, tt := range []struct {
		tr   Tracing
		want string
	}{
		{Tracing{SamplingRate: -0.1}, "Tracing.SamplingRate -0.1 must be between 0 and 1"},
		{Tracing{SamplingRate: 1.5}, "Tracing.SamplingRate 1.5 must be between 0 and 1"},
		{Tracing{SamplingRate: math.NaN()}, "Tracing.SamplingRate NaN"},
		{Tracing{Protocol: "udp"}, `Tracing.Protocol "udp": want "http" or "grpc"`},
	} {
		_, err := New(Settings{Store: newStore(t), Tracing: &tt.tr})
		var se *SettingsError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with %+v = %v, want a SettingsError saying %q", tt.tr, err, tt.want)
		}
	}
}

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit with tracing
// on, every request sampled: what a traced decision costs, its two spans
// made and ended, the export to a collector aside (the server is not
// serving, so no exporter runs).
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	s, _ := newServer(b, Settings{Paths: []string{writeFile(b, b.TempDir(), "bench.yaml", benchYAML)}, Tracing: &Tracing{SamplingRate: 1}})
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = rlReq("bench", 0, "user=u"+strconv.Itoa(i))
	}
	ctx := b.Context()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// The caller's trace context is read, and nothing else: baggage, which
// nothing uses, is not parsed.
func TestTracingReadsNoBaggage(t *testing.T) {
	tr := newTracer(Tracing{ServiceName: DefaultTracingServiceName})
	fields := tr.prop.Fields()
	if slices.Contains(fields, "baggage") || !slices.Contains(fields, "traceparent") || !slices.Contains(fields, "b3") {
		t.Errorf("the propagators read %q; want traceparent and b3, not baggage", fields)
	}
}
