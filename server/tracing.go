package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// Tracing is how a Server traces its decisions with OpenTelemetry: a span
// for each decision, under the caller's span when the request carries a
// W3C trace context (traceparent) or B3 headers, and a child span for
// each call to the store. The spans go over OTLP to the collector that
// the standard OTEL_EXPORTER_OTLP_* environment variables name, as the
// OpenTelemetry SDK reads them (OTEL_EXPORTER_OTLP_ENDPOINT, by default
// http://localhost:4318 over HTTP and localhost:4317 over gRPC), while
// Serve runs; Serve's graceful stop sends those still buffered.
type Tracing struct {
	// ServiceName, ServiceNamespace and ServiceInstanceID are the spans'
	// service.name, service.namespace and service.instance.id. The
	// default name is DefaultTracingServiceName; no namespace is sent
	// when it is empty; the default instance ID is a random UUID, a new
	// one for each New.
	ServiceName       string
	ServiceNamespace  string
	ServiceInstanceID string
	// SamplingRate is the share, from 0 to 1, of the traces the server
	// starts itself, for requests that carry no trace context, that it
	// samples. A request that carries one is sampled as its caller's span
	// was (parent-based sampling), whatever the rate. 0, the zero value,
	// starts none: only the callers' sampled traces are followed.
	SamplingRate float64
	// Protocol is how the spans are sent: TracingHTTP (OTLP over HTTP
	// with protobuf, the default) or TracingGRPC.
	Protocol string
}

// Tracing's protocols and defaults.
const (
	TracingHTTP = "http"
	TracingGRPC = "grpc"
	// DefaultTracingServiceName is Tracing.ServiceName's default.
	DefaultTracingServiceName = "sluice"
)

// withDefaults returns t with its defaults filled in, or an error for a
// value that cannot be used.
func (t Tracing) withDefaults() (Tracing, error) {
	if t.ServiceName == "" {
		t.ServiceName = DefaultTracingServiceName
	}
	if t.Protocol == "" {
		t.Protocol = TracingHTTP
	}
	if t.Protocol != TracingHTTP && t.Protocol != TracingGRPC {
		return t, fmt.Errorf("Tracing.Protocol %q: want %q or %q", t.Protocol, TracingHTTP, TracingGRPC)
	}
	if math.IsNaN(t.SamplingRate) || t.SamplingRate < 0 || t.SamplingRate > 1 {
		return t, fmt.Errorf("Tracing.SamplingRate %v must be between 0 and 1", t.SamplingRate)
	}
	if t.ServiceInstanceID == "" {
		t.ServiceInstanceID = newUUID()
	}
	return t, nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// A tracer makes the server's spans. Its provider has no exporter until
// Serve starts one (start), so that New starts nothing; spans ended
// before that, or after Serve's stop, are dropped.
type tracer struct {
	cfg  Tracing
	tp   *sdktrace.TracerProvider
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// tracerName names the server's spans' instrumentation scope.
const tracerName = "github.com/sluicehq/sluice/server"

func newTracer(cfg Tracing) *tracer {
	attrs := []attribute.KeyValue{
		attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.instance.id", cfg.ServiceInstanceID),
	}
	if cfg.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", cfg.ServiceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRate))),
	)
	return &tracer{
		cfg: cfg,
		tp:  tp,
		t:   tp.Tracer(tracerName),
		// W3C trace context last: a request that carries both it and B3
		// is continued as its traceparent says. No baggage: nothing
		// reads it, and parsing it would be work on every request for a
		// header the client writes.
		prop: propagation.NewCompositeTextMapPropagator(b3.New(), propagation.TraceContext{}),
	}
}

// start makes the OTLP exporter, which the OTEL_EXPORTER_OTLP_*
// variables configure, and sends the spans through it in batches from
// now on. Neither exporter connects before its first batch.
func (tr *tracer) start(ctx context.Context) error {
	var exp sdktrace.SpanExporter
	var err error
	if tr.cfg.Protocol == TracingGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("server: tracing: the OTLP exporter: %w", err)
	}
	tr.tp.RegisterSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	return nil
}

// stop sends the spans still buffered, for at most timeout, and stops the
// exporter: the spans of the requests that finished during the graceful
// stop are sent.
func (tr *tracer) stop(ctx context.Context, timeout time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return tr.tp.Shutdown(sctx)
}

// Attributes of the decision's span and of the store's.
const (
	attrDomain      = attribute.Key("ratelimit.domain")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrOutcome     = attribute.Key("ratelimit.outcome")
	attrEndpoint    = attribute.Key("sluice.endpoint")
	attrStore       = attribute.Key("sluice.store")
	attrChecks      = attribute.Key("sluice.store.checks")
)

// The decision span's outcomes: the request allowed, denied, malformed
// (InvalidArgument, 400), or not decided (the context ended, the store
// refused it).
const (
	outcomeOK        = "OK"
	outcomeOverLimit = "OVER_LIMIT"
	outcomeInvalid   = "INVALID"
	outcomeError     = "ERROR"
)

// decideTraced is decide in a span of its own, which the store's spans
// are children of: the protocol adapters' Service.Decide when tracing is
// on. Without tracing the adapters call decide itself, so that it costs
// nothing then.
func (s *Server) decideTraced(ctx context.Context, snap *protocol.Snapshot, req *decide.Request, e protocol.Endpoint) (*decide.Outcome, error) {
	ctx, span := s.tr.t.Start(ctx, "sluice.decide", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	out, err := s.decide(ctx, snap, req, e)
	if !span.IsRecording() {
		return out, err
	}
	outcome := outcomeOK
	switch bad := (*decide.BadRequest)(nil); {
	case err != nil && errors.As(err, &bad):
		outcome = outcomeInvalid
		span.RecordError(err)
	case err != nil:
		outcome = outcomeError
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case !out.Allowed:
		outcome = outcomeOverLimit
	}
	span.SetAttributes(
		attrDomain.String(keys.Clip(req.Domain)),
		attrDescriptors.Int(len(req.Descs)),
		attrOutcome.String(outcome),
		attrEndpoint.String(endpointNames[e]),
	)
	return out, err
}

// tracedStore is a store whose every Take is a span, a child of the
// decision's. It is what the Limiter decides with when tracing is on.
type tracedStore struct {
	sluice.Store
	t    trace.Tracer
	name string // "main" or "fallback"
}

var _ sluice.RuleChecker = (*tracedStore)(nil)

func (st *tracedStore) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	ctx, span := st.t.Start(ctx, "sluice.store.take", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrStore.String(st.name), attrChecks.Int(len(checks))))
	defer span.End()
	err := st.Store.Take(ctx, now, checks, out)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// CheckRule is the store's own, if it has one: the Limiter asks it of
// the store it is given.
func (st *tracedStore) CheckRule(r *sluice.PreparedRule) error {
	if rc, ok := st.Store.(sluice.RuleChecker); ok {
		return rc.CheckRule(r)
	}
	return nil
}

// wrap wraps store in spans when tracing is on (tr not nil); a nil
// store stays nil.
func (tr *tracer) wrap(store sluice.Store, name string) sluice.Store {
	if tr == nil || store == nil {
		return store
	}
	return &tracedStore{Store: store, t: tr.t, name: name}
}

// unary is the gRPC interceptor that continues the caller's trace: the
// trace context in the call's metadata, which Envoy's tracer sets, is
// the parent of the decision's span.
func (tr *tracer) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = tr.prop.Extract(ctx, metadataCarrier(md))
	}
	return handler(ctx, req)
}

// handler continues the caller's trace over HTTP: the trace context in
// the request's headers is the parent of the decision's span. POST /json's
// caller is the client that asks, which sets them. Forward auth's is the
// proxy, which passes the client's own headers on: they are believed only
// from the trusted proxies, as the other headers forward auth reads, and
// a request from any other peer starts a trace of its own.
func (tr *tracer) handler(next http.Handler, trust clientip.Trusted) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		believe := r.URL.Path == "/json"
		if protocol.IsAuthPath(r.URL.Path) {
			peer, ok := clientip.Parse(r.RemoteAddr)
			believe = ok && trust.Contains(peer)
		}
		if believe {
			r = r.WithContext(tr.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// metadataCarrier reads a trace context from gRPC metadata, whose keys
// are lower case, as the propagators ask for them.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}
