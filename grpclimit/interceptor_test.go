package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
)

const (
	methodCheck = "/grpc.health.v1.Health/Check"
	methodList  = "/grpc.health.v1.Health/List"
	methodWatch = "/grpc.health.v1.Health/Watch"
)

// env is a real gRPC server with the health service behind an
// Interceptor, on a loopback TCP listener, and a real client.
type env struct {
	clock  *fakeClock
	store  *flakyStore
	health *health.Server
	srv    *grpc.Server
	client healthpb.HealthClient
}

func start(t *testing.T, opts ...grpclimit.Option) *env {
	t.Helper()
	e := &env{clock: newFakeClock(), store: newStore(t), health: health.NewServer()}
	l, err := sluice.NewLimiter(e.store, sluice.WithClock(e.clock))
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(l, opts...)
	if err != nil {
		t.Fatalf("grpclimit.New: %v", err)
	}
	e.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
	healthpb.RegisterHealthServer(e.srv, e.health)
	e.client = e.clientOn(t, nil)
	return e
}

// clientOn serves e on a new loopback listener and returns a client of it.
// When peer is set, the server sees the client's connections as coming
// from peer instead of 127.0.0.1, as it would on a real network.
func (e *env) clientOn(t *testing.T, peer net.Addr) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var srvLn net.Listener = ln
	if peer != nil {
		srvLn = peerListener{ln, peer}
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(srvLn) }()
	t.Cleanup(func() {
		e.srv.Stop() // stops every listener; a second Stop does nothing
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// peerListener accepts connections that report addr as their remote
// address: the peer address gRPC hands to the interceptor.
type peerListener struct {
	net.Listener
	addr net.Addr
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return peerConn{c, l.addr}, nil
}

type peerConn struct {
	net.Conn
	addr net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

func (e *env) check(ctx context.Context, opts ...grpc.CallOption) error {
	_, err := e.client.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// denied checks that err is RESOURCE_EXHAUSTED and returns its RetryInfo
// delay, or -1 without one.
func denied(t *testing.T, err error) time.Duration {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("err = %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				t.Fatalf("RetryInfo delay: %v", err)
			}
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("err = %v, want code %v", err, want)
	}
}

func gcra(name string, rate int64) sluice.Rule {
	return sluice.Rule{Name: name, Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(rate)}
}

func TestUnaryLimitAndRetryInfo(t *testing.T) {
	e := start(t, grpclimit.WithRule(gcra("per-ip", 3), grpclimit.PeerIP()))
	ctx := t.Context()
	for i := range 3 {
		if err := e.check(ctx); err != nil {
			t.Fatalf("call %d: %v, want OK", i+1, err)
		}
	}
	// 3 per second: the next unit is a third of a second away, rounded up
	// to the nanosecond.
	const next = 333333334 * time.Nanosecond
	if got := denied(t, e.check(ctx)); got != next {
		t.Fatalf("RetryInfo delay = %v, want %v", got, next)
	}
	// Tight: a microsecond early is still denied, and says so; on time
	// passes.
	e.clock.Advance(next - time.Microsecond)
	if got := denied(t, e.check(ctx)); got != time.Microsecond {
		t.Fatalf("1µs early: RetryInfo delay = %v, want 1µs", got)
	}
	e.clock.Advance(time.Microsecond)
	if err := e.check(ctx); err != nil {
		t.Fatalf("after RetryInfo delay: %v, want OK", err)
	}
	wantCode(t, e.check(ctx), codes.ResourceExhausted)
}

func TestStreamLimitedAtStart(t *testing.T) {
	e := start(t, grpclimit.WithRule(gcra("watch", 1), grpclimit.PeerIP(), methodWatch))
	ctx := t.Context()

	first, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := first.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first stream: Recv = %v, %v; want SERVING", m, err)
	}

	second, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if got := denied(t, err); got != time.Second {
		t.Fatalf("second stream: RetryInfo delay = %v, want 1s", got)
	}

	// The open stream's messages are not limited.
	for _, s := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		e.health.SetServingStatus("", s)
		if m, err := first.Recv(); err != nil || m.GetStatus() != s {
			t.Fatalf("first stream: Recv = %v, %v; want %v", m, err, s)
		}
	}
	// Unary calls are not covered by the Watch rule.
	for i := range 5 {
		if err := e.check(ctx); err != nil {
			t.Fatalf("Check %d: %v", i, err)
		}
	}
	e.clock.Advance(time.Second)
	third, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.Recv(); err != nil {
		t.Fatalf("stream after 1s: %v", err)
	}
}

// observed records what an Observer saw.
type observed struct {
	mu    sync.Mutex
	calls []observation
}

type observation struct {
	method  string
	keys    map[string]string // rule name -> key
	allowed map[string]bool   // rule name -> its own decision
	res     sluice.Result
}

func (o *observed) observer() grpclimit.Option {
	return grpclimit.WithObserver(func(_ context.Context, method string, checks []sluice.Check, res sluice.Result) {
		ob := observation{method: method, keys: map[string]string{}, allowed: map[string]bool{}, res: res}
		for i, c := range checks {
			ob.keys[c.Rule.Name()] = c.Key
			ob.allowed[c.Rule.Name()] = res.Decisions[i].Allowed
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.calls = append(o.calls, ob)
	})
}

func (o *observed) last(t *testing.T) observation {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.calls) == 0 {
		t.Fatal("observer saw no call")
	}
	return o.calls[len(o.calls)-1]
}

func TestRulesPerMethodAllOrNothing(t *testing.T) {
	var o observed
	e := start(t,
		grpclimit.WithRule(gcra("all", 100), grpclimit.Const("")),
		grpclimit.WithRule(gcra("check", 1), grpclimit.PeerIP(), methodCheck),
		grpclimit.WithRule(gcra("health", 3), grpclimit.Join(grpclimit.Method(), grpclimit.PeerIP()), "/grpc.health.v1.Health/*"),
		o.observer(),
	)
	ctx := t.Context()
	list := func() error { _, err := e.client.List(ctx, &healthpb.HealthListRequest{}); return err }

	if err := e.check(ctx); err != nil {
		t.Fatal(err)
	}
	got := o.last(t)
	if got.method != methodCheck || got.keys["all"] != "" || got.keys["check"] != "127.0.0.1" ||
		got.keys["health"] != methodCheck+"|127.0.0.1" {
		t.Fatalf("observed %q with keys %v", got.method, got.keys)
	}
	wantCode(t, e.check(ctx), codes.ResourceExhausted)
	got = o.last(t)
	if got.allowed["check"] || !got.allowed["all"] || !got.allowed["health"] {
		t.Fatalf("per-rule decisions %v, want only check denied", got.allowed)
	}
	// All-or-nothing: the denied call charged neither "all" nor "health".
	if r := got.res.Decisions; r[0].Remaining != 99 || r[2].Remaining != 2 {
		t.Fatalf("after a denial: all has %d, health %d left; want 99, 2", r[0].Remaining, r[2].Remaining)
	}

	// List is another method: "check" does not cover it, and "health"
	// counts it under its own key.
	for i := range 3 {
		if err := list(); err != nil {
			t.Fatalf("List %d: %v", i+1, err)
		}
	}
	if got := o.last(t); len(got.keys) != 2 || got.keys["health"] != methodList+"|127.0.0.1" {
		t.Fatalf("List keys = %v", got.keys)
	}
	wantCode(t, list(), codes.ResourceExhausted)
}

func TestMetadataKeys(t *testing.T) {
	var o observed
	e := start(t,
		grpclimit.WithRule(gcra("per-key", 1), grpclimit.Optional(grpclimit.APIKey("x-api-key"))),
		grpclimit.WithRule(gcra("per-tenant", 2), grpclimit.Metadata("X-Tenant")),
		o.observer(),
	)
	withMD := func(kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), kv...)
	}
	// No tenant: Metadata fails the call, as the client's to fix.
	err := e.check(withMD("x-api-key", "k1"))
	wantCode(t, err, codes.InvalidArgument)
	if msg := status.Convert(err).Message(); msg != `grpclimit: rule "per-tenant": call has no key: no x-tenant metadata` {
		t.Fatalf("message %q does not name the rule and the missing metadata", msg)
	}
	// No API key: that rule is skipped, the tenant's applies.
	if err := e.check(withMD("x-tenant", "a")); err != nil {
		t.Fatal(err)
	}
	if got := o.last(t); len(got.keys) != 1 || got.keys["per-tenant"] != "a" {
		t.Fatalf("keys = %v, want only per-tenant a", got.keys)
	}
	// Each API key has its own quota; the key is a digest, not the secret.
	if err := e.check(withMD("x-tenant", "b", "x-api-key", "k1")); err != nil {
		t.Fatal(err)
	}
	if k := o.last(t).keys["per-key"]; !strings.HasPrefix(k, "#") || strings.Contains(k, "k1") {
		t.Fatalf("API key stored as %q", k)
	}
	wantCode(t, e.check(withMD("x-tenant", "c", "x-api-key", "k1")), codes.ResourceExhausted)
	if err := e.check(withMD("x-tenant", "c", "x-api-key", "k2")); err != nil {
		t.Fatal(err)
	}
	// Tenant a has one left of 2; then it is out.
	if err := e.check(withMD("x-tenant", "a")); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.check(withMD("x-tenant", "a")), codes.ResourceExhausted)
}

// TestFirstKeepsPartsApart: with First(APIKey("x-api-key"), PeerIP()), or
// the Metadata the docs once suggested, a client that sends an address as
// its API key spends its own quota, not that of the keyless callers at
// that address.
func TestFirstKeepsPartsApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  grpclimit.KeyFunc
	}{
		{"Metadata", grpclimit.First(grpclimit.Metadata("x-api-key"), grpclimit.PeerIP())},
		{"APIKey", grpclimit.First(grpclimit.APIKey("x-api-key"), grpclimit.PeerIP())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o observed
			e := start(t, grpclimit.WithRule(gcra("per-client", 2), tc.key), o.observer())
			victim := e.clientOn(t, &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 50000})
			// The attacker, at 127.0.0.1, poses as the address.
			forged := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "203.0.113.7")
			for i := range 2 {
				if err := e.check(forged); err != nil {
					t.Fatalf("forged call %d: %v", i+1, err)
				}
			}
			forgedKey := o.last(t).keys["per-client"]
			wantCode(t, e.check(forged), codes.ResourceExhausted)

			// The keyless caller at 203.0.113.7 still has its quota.
			for i := range 2 {
				if _, err := victim.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatalf("call %d of the caller at 203.0.113.7, after the forged calls: %v (forged key %q, its key %q)",
						i+1, err, forgedKey, o.last(t).keys["per-client"])
				}
			}
			if k := o.last(t).keys["per-client"]; k != "1:203.0.113.7" {
				t.Fatalf("keyless caller keyed %q, want 1:203.0.113.7", k)
			}
			_, err := victim.Check(t.Context(), &healthpb.HealthCheckRequest{})
			wantCode(t, err, codes.ResourceExhausted)
			// And the caller at 127.0.0.1, keyless, is a third client.
			if err := e.check(t.Context()); err != nil {
				t.Fatalf("keyless call from 127.0.0.1: %v", err)
			}
		})
	}
}

func TestHeaders(t *testing.T) {
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 3, Period: 3 * time.Second}}
	e := start(t,
		grpclimit.WithRule(perIP, grpclimit.PeerIP()),
		grpclimit.WithRule(sluice.Rule{Name: "shadow", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1), Shadow: true}, grpclimit.PeerIP()),
		grpclimit.WithHeaders(),
	)
	ctx := t.Context()
	const policy = `"per-ip";q=3;w=3`
	for i, want := range []string{
		`"per-ip";r=2;t=1`,
		`"per-ip";r=1;t=2`,
		`"per-ip";r=0;t=3`,
		`"per-ip";r=0;t=1`, // denied: t is the retry delay, not the 3s to idle
	} {
		var md metadata.MD
		err := e.check(ctx, grpc.Header(&md))
		if (err == nil) != (i < 3) {
			t.Fatalf("call %d: err = %v", i+1, err)
		}
		if got := md.Get(grpclimit.MetadataRateLimitPolicy); len(got) != 1 || got[0] != policy {
			t.Errorf("call %d: ratelimit-policy = %q, want %q", i+1, got, policy)
		}
		if got := md.Get(grpclimit.MetadataRateLimit); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: ratelimit = %q, want %q", i+1, got, want)
		}
	}
}

func TestShadow(t *testing.T) {
	t.Run("all", func(t *testing.T) {
		var o observed
		e := start(t, grpclimit.WithRule(gcra("per-ip", 1), grpclimit.PeerIP()), grpclimit.WithShadow(), grpclimit.WithHeaders(), o.observer())
		for i := range 3 {
			var md metadata.MD
			if err := e.check(t.Context(), grpc.Header(&md)); err != nil {
				t.Fatalf("call %d in shadow mode: %v", i+1, err)
			}
			if got := o.last(t).res.Allowed; got != (i == 0) {
				t.Fatalf("call %d: observed Allowed %v, want %v", i+1, got, i == 0)
			}
			if len(md.Get(grpclimit.MetadataRateLimit)) != 0 {
				t.Fatalf("call %d: shadow mode sent RateLimit fields %v", i+1, md)
			}
		}
	})
	t.Run("one rule", func(t *testing.T) {
		var o observed
		shadow := gcra("try", 1)
		shadow.Shadow = true
		e := start(t, grpclimit.WithRule(shadow, grpclimit.PeerIP()), grpclimit.WithRule(gcra("enforced", 2), grpclimit.PeerIP()), o.observer())
		for i := range 2 {
			if err := e.check(t.Context()); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		if got := o.last(t).allowed; got["try"] || !got["enforced"] {
			t.Fatalf("second call: per-rule %v, want try denied, enforced allowed", got)
		}
		if got := denied(t, e.check(t.Context())); got != 500*time.Millisecond {
			t.Fatalf("enforced rule: RetryInfo delay = %v, want 500ms", got)
		}
	})
}

func TestStoreFailure(t *testing.T) {
	down := errors.New("store down")
	for _, tc := range []struct {
		failure sluice.Failure
		want    codes.Code
	}{
		{sluice.FailOpen, codes.OK},
		{sluice.FailClosed, codes.ResourceExhausted},
		{sluice.FailLocal, codes.ResourceExhausted}, // no fallback store: closed
	} {
		t.Run(tc.failure.String(), func(t *testing.T) {
			var o observed
			r := gcra("per-ip", 10)
			r.Failure = tc.failure
			e := start(t, grpclimit.WithRule(r, grpclimit.PeerIP()), grpclimit.WithHeaders(), o.observer())
			e.store.setErr(down)
			var md metadata.MD
			err := e.check(t.Context(), grpc.Header(&md))
			wantCode(t, err, tc.want)
			if !errors.Is(o.last(t).res.Err, down) {
				t.Fatalf("observed Err = %v, want %v", o.last(t).res.Err, down)
			}
			if len(md.Get(grpclimit.MetadataRateLimit)) != 0 || len(md.Get(grpclimit.MetadataRateLimitPolicy)) != 1 {
				t.Fatalf("headers %v: want the policy only, nothing known is left", md)
			}
			if tc.want == codes.OK {
				return
			}
			if got := denied(t, err); got != time.Second {
				t.Fatalf("RetryInfo delay = %v, want the limiter's 1s", got)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, "unavailable") || strings.Contains(msg, "store down") {
				t.Fatalf("message %q: want the store named unavailable, its error not leaked", msg)
			}
		})
	}
}

func TestCanNeverPass(t *testing.T) {
	zero := sluice.Rule{Name: "none", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(0)}
	e := start(t, grpclimit.WithRule(zero, grpclimit.PeerIP()))
	if got := denied(t, e.check(t.Context())); got != -1 {
		t.Fatalf("a call that can never pass has RetryInfo %v, want none", got)
	}
}

// quotaFailure returns the QuotaFailure of a denied call's status as
// "quota_id q=quota_value" lines, or nil without one.
func quotaFailure(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, d := range status.Convert(err).Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			out = []string{}
			for _, v := range qf.GetViolations() {
				out = append(out, fmt.Sprintf("%s q=%d", v.GetQuotaId(), v.GetQuotaValue()))
			}
		}
	}
	return out
}

// A denial's details say what httplimit's 429 says: RetryInfo for
// Retry-After, and a QuotaFailure naming the violated policies (the
// enforced rules that denied) with their quotas.
func TestDenialDetails(t *testing.T) {
	shadow := gcra("trial", 1)
	shadow.Shadow = true
	e := start(t,
		grpclimit.WithRule(gcra("per-ip", 2), grpclimit.PeerIP()),
		grpclimit.WithRule(gcra("global", 100), grpclimit.Const("all")),
		grpclimit.WithRule(shadow, grpclimit.PeerIP()),
	)
	for range 2 {
		if err := e.check(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	err := e.check(t.Context())
	if got := denied(t, err); got != 500*time.Millisecond {
		t.Fatalf("RetryInfo delay = %v, want 500ms", got)
	}
	if got, want := quotaFailure(t, err), []string{"per-ip q=2"}; !slices.Equal(got, want) {
		t.Fatalf("QuotaFailure = %q, want %q", got, want)
	}

	// A call that can never pass: no RetryInfo, as no Retry-After, but
	// the violation all the same.
	zero := sluice.Rule{Name: "none", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(0)}
	e = start(t, grpclimit.WithRule(zero, grpclimit.PeerIP()))
	err = e.check(t.Context())
	if got, want := quotaFailure(t, err), []string{"none q=0"}; denied(t, err) != -1 || !slices.Equal(got, want) {
		t.Fatalf("never: RetryInfo %v, QuotaFailure %q; want none, %q", denied(t, err), got, want)
	}
}

func TestHostileMetadata(t *testing.T) {
	var o observed
	e := start(t,
		grpclimit.WithRule(gcra("tenant", 1000), grpclimit.Metadata("x-tenant")),
		grpclimit.WithRule(gcra("raw", 1000), grpclimit.Optional(grpclimit.Metadata("x-raw-bin"))),
		grpclimit.WithRule(gcra("auth", 1000), grpclimit.Optional(grpclimit.APIKey("authorization"))),
		grpclimit.WithRule(gcra("pair", 1000), grpclimit.Join(grpclimit.Metadata("x-tenant"), grpclimit.Method())),
		o.observer(),
	)
	huge := strings.Repeat("a|\\", 10000)
	cases := []struct {
		name string
		md   []string
	}{
		{"huge value", []string{"x-tenant", huge}},
		{"huge near-twin", []string{"x-tenant", huge + "b"}},
		{"digest lookalike", []string{"x-tenant", "#not-a-digest"}},
		{"binary", []string{"x-tenant", "t1", "x-raw-bin", "\x00\xff|\\\n"}},
		{"many values", []string{"x-tenant", "first", "x-tenant", "second", "x-tenant", huge}},
		{"bearer only", []string{"x-tenant", "t2", "authorization", "Bearer "}},
		{"bearer huge", []string{"x-tenant", "t3", "authorization", "bEaReR " + huge}},
	}
	keys := map[string]string{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := e.check(metadata.AppendToOutgoingContext(t.Context(), tc.md...))
			if err != nil {
				t.Fatalf("err = %v, want OK", err)
			}
			got := o.last(t)
			for rule, k := range got.keys {
				if rule != "pair" && len(k) > grpclimit.MaxKeyLen {
					t.Errorf("rule %s: key of %d bytes, want at most %d", rule, len(k), grpclimit.MaxKeyLen)
				}
			}
			if k := got.keys["tenant"]; keys[k] != "" {
				t.Errorf("tenant key %q also made by %s", k, keys[k])
			} else {
				keys[k] = tc.name
			}
		})
	}
	if keys["first"] == "" {
		t.Errorf("many values: want the first value as the key, have %v", keys)
	}
}

// A call without the key a rule needs is the client's to fix:
// InvalidArgument naming the rule and the metadata, as httplimit answers
// 400, never Internal. Optional lets it through under the other rules.
func TestMissingKey(t *testing.T) {
	var o observed
	strict := start(t, grpclimit.WithRule(gcra("per-key", 5), grpclimit.APIKey("x-api-key")), o.observer())
	err := strict.check(t.Context())
	wantCode(t, err, codes.InvalidArgument)
	if msg := status.Convert(err).Message(); msg != `grpclimit: rule "per-key": call has no key: no API key in the x-api-key metadata` {
		t.Fatalf("message %q, want the rule and the metadata named once", msg)
	}
	o.mu.Lock()
	n := len(o.calls)
	o.mu.Unlock()
	if n != 0 {
		t.Fatalf("observer saw %d undecided calls", n)
	}

	usual := start(t,
		grpclimit.WithRule(gcra("per-ip", 5), grpclimit.PeerIP()),
		grpclimit.WithRule(gcra("per-key", 5), grpclimit.Optional(grpclimit.APIKey("x-api-key"))),
		o.observer(),
	)
	if err := usual.check(t.Context()); err != nil {
		t.Fatalf("Optional, no key: %v", err)
	}
	if got := o.last(t); len(got.keys) != 1 || got.keys["per-ip"] != "127.0.0.1" {
		t.Fatalf("Optional, no key: keys %v, want only per-ip", got.keys)
	}

	// A key function's own failure is still the server's.
	broken := start(t, grpclimit.WithRule(gcra("per-user", 5), func(context.Context, string) (string, error) {
		return "", errors.New("user table unreachable")
	}))
	wantCode(t, broken.check(t.Context()), codes.Internal)
}

func TestBadPeer(t *testing.T) {
	// Calls made in-process, without a gRPC transport, have whatever peer
	// the caller put in their context.
	l, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	strict, err := grpclimit.New(l, grpclimit.WithRule(gcra("ip", 10), grpclimit.PeerIP()))
	if err != nil {
		t.Fatal(err)
	}
	lenient, err := grpclimit.New(l, grpclimit.WithRule(gcra("ip-or-local", 10), grpclimit.First(grpclimit.PeerIP(), grpclimit.Const("local"))))
	if err != nil {
		t.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	for _, tc := range peerCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx(t.Context())
			called := false
			handler := func(context.Context, any) (any, error) { called = true; return "ok", nil }
			_, err := strict.Unary(ctx, nil, info, handler)
			if tc.key == "" {
				wantCode(t, err, codes.InvalidArgument)
				if called {
					t.Fatal("handler ran for a call that could not be keyed")
				}
			} else if err != nil || !called {
				t.Fatalf("Unary: %v, handler ran: %v", err, called)
			}
			called = false
			if _, err := lenient.Unary(ctx, nil, info, handler); err != nil || !called {
				t.Fatalf("First(PeerIP(), Const): %v, handler ran: %v", err, called)
			}
		})
	}
}

func TestStreamInterceptorDirect(t *testing.T) {
	l, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(l, grpclimit.WithRule(gcra("ip", 1), grpclimit.PeerIP()))
	if err != nil {
		t.Fatal(err)
	}
	ss := &fakeStream{ctx: context.Background()} // no peer
	err = ic.Stream(nil, ss, &grpc.StreamServerInfo{FullMethod: methodWatch}, func(any, grpc.ServerStream) error {
		t.Fatal("handler ran")
		return nil
	})
	wantCode(t, err, codes.InvalidArgument)
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func TestCanceledContext(t *testing.T) {
	l, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(l, grpclimit.WithRule(gcra("all", 1), grpclimit.Const("")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = ic.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodCheck}, func(context.Context, any) (any, error) {
		t.Fatal("handler ran")
		return nil, nil
	})
	wantCode(t, err, codes.Canceled)
}

func TestNewErrors(t *testing.T) {
	l, err := sluice.NewLimiter(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	ok := gcra("ok", 1)
	for _, tc := range []struct {
		name string
		l    *sluice.Limiter
		opts []grpclimit.Option
		want string
	}{
		{"nil limiter", nil, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP())}, "nil Limiter"},
		{"no rules", l, nil, "no rules"},
		{"nil key", l, []grpclimit.Option{grpclimit.WithRule(ok, nil)}, "no KeyFunc"},
		{"no name", l, []grpclimit.Option{grpclimit.WithRule(sluice.Rule{Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)}, grpclimit.PeerIP())}, "no name"},
		{"bad limit", l, []grpclimit.Option{grpclimit.WithRule(sluice.Rule{Name: "x", Algorithm: sluice.AlgoGCRA}, grpclimit.PeerIP())}, "invalid limit"},
		{"unknown algorithm", l, []grpclimit.Option{grpclimit.WithRule(sluice.Rule{Name: "x", Algorithm: "magic", Limit: sluice.PerSecond(1)}, grpclimit.PeerIP())}, "unknown algorithm"},
		{"duplicate", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP()), grpclimit.WithRule(ok, grpclimit.Method())}, "two rules"},
		{"bare method", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP(), "Check")}, `"Check"`},
		{"no method", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP(), "/grpc.health.v1.Health/")}, "want"},
		{"no service", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP(), "//Check")}, "want"},
		{"too deep", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP(), "/a/b/c")}, "want"},
		{"partial wildcard", l, []grpclimit.Option{grpclimit.WithRule(ok, grpclimit.PeerIP(), "/a.B/Ch*")}, "want"},
		{"name not ASCII", l, []grpclimit.Option{grpclimit.WithRule(gcra("débit", 1), grpclimit.PeerIP()), grpclimit.WithHeaders()}, "printable ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ic, err := grpclimit.New(tc.l, tc.opts...)
			if err == nil || ic != nil {
				t.Fatalf("New = %v, %v; want an error", ic, err)
			}
			if !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want grpclimit: ... %s", err, tc.want)
			}
		})
	}
	// A name that is not ASCII is fine without the fields.
	if _, err := grpclimit.New(l, grpclimit.WithRule(gcra("débit", 1), grpclimit.PeerIP())); err != nil {
		t.Fatal(err)
	}
}
