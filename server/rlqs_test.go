package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	quotapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/rlqstest"
)

// rlqsYAML has a bucket of each kind RLQS assigns. The api bucket's limit
// renews every 100ms (a tenth of its period), with a TTL of 300ms; its
// authority key is apiKey.
const rlqsYAML = `domain: quota
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 10000}
  - key: name
    value: closed
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: open
    rate_limit: {unlimited: true}
  - key: name
    value: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: name
    value: svc
    descriptors:
      - key: env
        rate_limit: {unit: second, requests_per_unit: 1000}
rlqs:
  bucket_keys: [name, env]
`

const apiKey = "rlqs:quota.name_api:quota|name=api"

// startRLQS runs a server of rlqsYAML on the system clock (RLQS paces its
// renewals by timers) with the memory authority auth.
func startRLQS(t *testing.T, auth lease.Authority, q RLQS) *env {
	t.Helper()
	return start(t, Settings{
		Paths: []string{writeFile(t, t.TempDir(), "quota.yaml", rlqsYAML)},
		Clock: sluice.SystemClock, Authority: auth, RLQS: q, ShutdownTimeout: 30 * time.Second,
	})
}

// bucketSettings are a bucket's filter settings: reports every interval,
// and an expired assignment falls back to DENY_ALL for a minute.
func bucketSettings(interval time.Duration) *quotapb.RateLimitQuotaBucketSettings {
	return &quotapb.RateLimitQuotaBucketSettings{
		ReportingInterval: durationpb.New(interval),
		ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{
			ExpiredAssignmentBehaviorTimeout: durationpb.New(time.Minute),
			ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_FallbackRateLimit{
				FallbackRateLimit: &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{BlanketRule: typepb.RateLimitStrategy_DENY_ALL}}},
		},
	}
}

// newRLQSClient runs a client of domain quota whose requests are their
// bucket ids, over conns, until the test ends.
func newRLQSClient(t *testing.T, interval time.Duration, conns ...grpc.ClientConnInterface) *rlqstest.Client {
	t.Helper()
	c := rlqstest.New(rlqstest.Config{
		Domain: "quota",
		Bucket: func(req any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
			return req.(map[string]string), bucketSettings(interval)
		},
		Conns: conns,
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

// tokenRate is a token bucket strategy's refill in units per second, -1
// for another strategy.
func tokenRate(st *typepb.RateLimitStrategy) float64 {
	tb := st.GetTokenBucket()
	if tb == nil {
		return -1
	}
	return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
}

// Streams share a bucket's limit in proportion to their reported demand:
// at demands over the limit, each stream's token bucket refills at its
// proportional part, within a quarter, and the parts never sum past the
// limit.
func TestRLQSAssignmentsFollowDemand(t *testing.T) {
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			auth := lease.NewMemoryAuthority()
			e := startRLQS(t, auth, RLQS{})
			api := map[string]string{"name": "api"}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			clients := make([]*rlqstest.Client, n)
			weights, total := make([]float64, n), 0.0
			for i := range n {
				clients[i] = newRLQSClient(t, 50*time.Millisecond, e.conn)
				weights[i] = float64(i + 1)
				total += weights[i]
			}
			// 1.5 times the limit in all, uneven.
			for i, c := range clients {
				wg.Go(func() { c.Drive(ctx, api, 15000*weights[i]/total) })
			}
			var last string
			begin := time.Now()
			waitFor(t, "shares in proportion to demand", func() bool {
				hs, err := auth.Holdings(ctx, apiKey)
				if err != nil {
					t.Fatal(err)
				}
				held := int64(0)
				for _, h := range hs {
					held += h.Share
				}
				if held > 10000 {
					t.Fatalf("the shares held sum to %d, past the limit of 10000: %+v", held, hs)
				}
				good := true
				var b strings.Builder
				for i, c := range clients {
					_, st := c.State(api, time.Now())
					r := tokenRate(st)
					want := 10000 * weights[i] / total
					fmt.Fprintf(&b, " %.0f (want %.0f)", r, want)
					good = good && math.Abs(r-want) <= want/4
				}
				last = b.String()
				// Past the first second: the demands measured, not
				// the first guesses.
				return good && time.Since(begin) > time.Second
			})
			t.Logf("shares:%s", last)
		})
	}
}

// A bucket no limit applies to, or of a domain the config lacks, gets no
// assignment: the client stays in its no-assignment state, and the
// subscription is counted.
func TestRLQSUnknownBucket(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	c := newRLQSClient(t, 20*time.Millisecond, e.conn)
	nope := map[string]string{"name": "nope"}
	c.Allow(nope, time.Now())
	waitFor(t, "the unknown bucket counted", func() bool {
		return counter(t, e.srv, "sluice_rlqs_buckets_total", "result", "unknown") == 1
	})
	// Known buckets reported after it are assigned: the unknown one was
	// seen and passed over.
	c.Allow(map[string]string{"name": "open"}, time.Now())
	waitFor(t, "the open bucket assigned", func() bool {
		s, _ := c.State(map[string]string{"name": "open"}, time.Now())
		return s == rlqstest.Active
	})
	if s, st := c.State(nope, time.Now()); s != rlqstest.NoAssignment {
		t.Errorf("unknown bucket: state %q (%v), want %q", s, st, rlqstest.NoAssignment)
	}

	other := rlqstest.New(rlqstest.Config{Domain: "elsewhere", Conns: []grpc.ClientConnInterface{e.conn},
		Bucket: func(req any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
			return req.(map[string]string), bucketSettings(20 * time.Millisecond)
		}})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { other.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	other.Allow(map[string]string{"name": "api"}, time.Now())
	waitFor(t, "the unknown domain's bucket counted", func() bool {
		return counter(t, e.srv, "sluice_rlqs_buckets_total", "result", "unknown") == 2
	})
}

// requests_per_unit: 0 is DENY_ALL, unlimited ALLOW_ALL, and a limit in
// shadow mode ALLOW_ALL, each counted; a bucket's keys match in the
// section's order, whatever order the client gives them in.
func TestRLQSBlanketRules(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	c := newRLQSClient(t, 20*time.Millisecond, e.conn)
	allow := &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{BlanketRule: typepb.RateLimitStrategy_ALLOW_ALL}}
	deny := &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{BlanketRule: typepb.RateLimitStrategy_DENY_ALL}}
	for _, tt := range []struct {
		name   string
		result string
		want   *typepb.RateLimitStrategy
	}{
		{"closed", "deny_all", deny},
		{"open", "allow_all", allow},
		{"trial", "shadow", allow},
	} {
		b := map[string]string{"name": tt.name}
		c.Allow(b, time.Now())
		waitFor(t, tt.name+" assigned", func() bool {
			s, st := c.State(b, time.Now())
			return s == rlqstest.Active && st.GetBlanketRule() == tt.want.GetBlanketRule() && st.GetTokenBucket() == nil
		})
		if got := counter(t, e.srv, "sluice_rlqs_buckets_total", "result", tt.result); got != 1 {
			t.Errorf("%s: sluice_rlqs_buckets_total{result=%q} = %v, want 1", tt.name, tt.result, got)
		}
		if ok := c.Allow(b, time.Now()); ok != (tt.want == allow) {
			t.Errorf("%s: Allow = %v under %v", tt.name, ok, tt.want)
		}
	}
	svc := map[string]string{"env": "prod", "name": "svc"}
	c.Allow(svc, time.Now())
	waitFor(t, "svc/prod assigned a token bucket", func() bool {
		s, st := c.State(svc, time.Now())
		return s == rlqstest.Active && tokenRate(st) > 0
	})
}

// A bucket the stream stops reporting is abandoned after AbandonAfter:
// the client is told to erase it, and its share goes back to the others.
func TestRLQSAbandon(t *testing.T) {
	auth := lease.NewMemoryAuthority()
	e := startRLQS(t, auth, RLQS{AbandonAfter: 500 * time.Millisecond})
	api := map[string]string{"name": "api"}
	// It reports once, at its first request, and then not for an hour.
	quiet := newRLQSClient(t, time.Hour, e.conn)
	quiet.Allow(api, time.Now())
	waitFor(t, "the quiet client assigned", func() bool {
		s, _ := quiet.State(api, time.Now())
		return s == rlqstest.Active
	})
	waitFor(t, "the quiet client told to abandon", func() bool {
		s, _ := quiet.State(api, time.Now())
		return s == rlqstest.Abandoned
	})
	waitFor(t, "its share given back", func() bool {
		hs, err := auth.Holdings(t.Context(), apiKey)
		return err == nil && len(hs) == 0
	})
}

// Before a graceful stop every stream is sent a zero-TTL assignment for
// each of its buckets, which expires it at once, and is ended with
// UNAVAILABLE; the client then reconnects to another replica and is
// assigned again.
func TestRLQSGracefulStopAndReconnect(t *testing.T) {
	a := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	b := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	c := newRLQSClient(t, 20*time.Millisecond, a.conn, b.conn)
	api := map[string]string{"name": "api"}
	c.Allow(api, time.Now())
	waitFor(t, "assigned by the first replica", func() bool {
		s, _ := c.State(api, time.Now())
		return s == rlqstest.Active
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { c.Drive(ctx, api, 100) })
	a.stop(t)
	waitFor(t, "the first stream ended with UNAVAILABLE: the server is stopping", func() bool {
		err := c.Err()
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "stopping")
	})
	waitFor(t, "a second stream, to the other replica, assigned", func() bool {
		s, _ := c.State(api, time.Now())
		return c.Streams() >= 2 && s == rlqstest.Active
	})
}

// A stream the client closes leaves a client that enforces its
// assignment until its TTL: the authority keeps counting the stream's
// share until then, rather than giving it to others at once.
func TestRLQSClosedStreamKeepsShare(t *testing.T) {
	auth := lease.NewMemoryAuthority()
	yaml := strings.Replace(rlqsYAML, "rate_limit: {unit: second, requests_per_unit: 10000}",
		"rate_limit: {unit: second, requests_per_unit: 10000, lease: {renew: 100ms, ttl: 1h}}", 1)
	e := start(t, Settings{
		Paths: []string{writeFile(t, t.TempDir(), "quota.yaml", yaml)},
		Clock: sluice.SystemClock, Authority: auth, ShutdownTimeout: 30 * time.Second,
	})
	c := rlqstest.New(rlqstest.Config{Domain: "quota", Conns: []grpc.ClientConnInterface{e.conn},
		Bucket: func(req any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
			return req.(map[string]string), bucketSettings(20 * time.Millisecond)
		}})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	api := map[string]string{"name": "api"}
	c.Allow(api, time.Now())
	waitFor(t, "assigned", func() bool {
		s, _ := c.State(api, time.Now())
		return s == rlqstest.Active
	})
	cancel()
	wg.Wait()
	waitFor(t, "the server done with the stream", func() bool { return len(e.srv.rlqsAssignments()) == 0 })
	hs, err := auth.Holdings(t.Context(), apiKey)
	if err != nil || len(hs) != 1 || hs[0].Share == 0 || !hs[0].Expires.After(time.Now().Add(30*time.Minute)) {
		t.Errorf("after the stream closed the authority holds %+v, %v; want its share, to its TTL", hs, err)
	}
}

// The zero-TTL assignment of a graceful stop is applied as an immediate
// expiry: the bucket's expired-assignment behaviour (here DENY_ALL) holds
// at once, with no other replica to turn to.
func TestRLQSStopExpires(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	c := newRLQSClient(t, 20*time.Millisecond, e.conn)
	open := map[string]string{"name": "open"}
	c.Allow(open, time.Now())
	waitFor(t, "assigned", func() bool {
		s, _ := c.State(open, time.Now())
		return s == rlqstest.Active
	})
	e.stop(t)
	waitFor(t, "the assignment expired", func() bool {
		s, _ := c.State(open, time.Now())
		return s == rlqstest.Expired
	})
	if c.Allow(open, time.Now()) {
		t.Error("after the stop: allowed, want the expired behaviour's DENY_ALL")
	}
}

// Hostile input gets a clear error that ends the stream: a first report
// with no domain, a change of domain, an empty or oversized bucket id, a
// negative time_elapsed. Buckets past MaxBuckets get no assignment and
// are counted; streams past MaxStreams are refused; absurd counts are
// taken at the authority's cap.
func TestRLQSBadInput(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{MaxStreams: 3, MaxBuckets: 2})
	cl := rlqspb.NewRateLimitQuotaServiceClient(e.conn)
	usage := func(id map[string]string) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: id},
			TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: math.MaxUint64, NumRequestsDenied: math.MaxUint64}
	}
	many := make(map[string]string)
	for i := range 65 {
		many[fmt.Sprint("k", i)] = "v"
	}
	neg := usage(map[string]string{"name": "api"})
	neg.TimeElapsed = durationpb.New(-time.Second)
	for _, tt := range []struct {
		name string
		msgs []*rlqspb.RateLimitQuotaUsageReports
		want string
	}{
		{"no domain", []*rlqspb.RateLimitQuotaUsageReports{{}}, "domain: missing"},
		{"domain changed", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "quota"}, {Domain: "other"}}, `open another stream for "other"`},
		{"empty bucket id", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil)}}}, "bucket_id: missing or empty"},
		{"too many keys", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(many)}}}, "65 keys; at most 64"},
		{"huge value", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"name": strings.Repeat("x", 5000)})}}}, "at most 4096"},
		{"negative time", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{neg}}}, "time_elapsed: want a duration of at least 0"},
	} {
		st, err := cl.StreamRateLimitQuotas(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tt.msgs {
			st.Send(m)
		}
		_, err = st.Recv()
		for err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: the stream ended with %v, want INVALID_ARGUMENT with %q", tt.name, err, tt.want)
		}
	}

	// Absurd counts, then two buckets more than the bound.
	st, err := cl.StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "quota"}
	for _, name := range []string{"api", "open", "closed", "trial"} {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(map[string]string{"name": name}))
	}
	if err := st.Send(m); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetBucketAction()); n != 2 {
		t.Errorf("%d assignments, want 2: the bound on buckets", n)
	}
	for _, a := range resp.GetBucketAction() {
		if a.GetBucketId().GetBucket()["name"] == "api" {
			if r := tokenRate(a.GetQuotaAssignmentAction().GetRateLimitStrategy()); r < 0 || r > 10000 {
				t.Errorf("api at an absurd demand: a refill of %v per second, want within the limit, 10000", r)
			}
		}
	}
	if got := counter(t, e.srv, "sluice_rlqs_buckets_total", "result", "refused"); got != 2 {
		t.Errorf("sluice_rlqs_buckets_total{result=refused} = %v, want 2", got)
	}

	// Three streams are open (this one and two more); a fourth is refused.
	var open []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for range 2 {
		s, err := cl.StreamRateLimitQuotas(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: m.BucketQuotaUsages[:1]})
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	s4, err := cl.StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s4.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fourth stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	_ = open
}

// MaxTotalBuckets bounds the buckets of all the streams together: a
// bucket past it gets no assignment, counted, and a stream that ends
// gives its buckets' places back.
func TestRLQSTotalBuckets(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{MaxTotalBuckets: 2})
	cl := rlqspb.NewRateLimitQuotaServiceClient(e.conn)
	subscribe := func(ctx context.Context, names ...string) int {
		t.Helper()
		st, err := cl.StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := &rlqspb.RateLimitQuotaUsageReports{Domain: "quota"}
		for _, n := range names {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": n}}})
		}
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			return -1 // no assignment came before ctx ended
		}
		return len(resp.GetBucketAction())
	}
	first, cancel := context.WithCancel(t.Context())
	if n := subscribe(first, "closed"); n != 1 {
		t.Fatalf("the first stream: %d assignments, want 1", n)
	}
	if n := subscribe(t.Context(), "api", "open"); n != 1 {
		t.Fatalf("the second stream, past the bound of 2: %d assignments, want 1", n)
	}
	if got := counter(t, e.srv, "sluice_rlqs_buckets_total", "result", "refused"); got != 1 {
		t.Errorf("sluice_rlqs_buckets_total{result=refused} = %v, want 1", got)
	}
	cancel()
	waitFor(t, "the first stream's bucket given back", func() bool {
		ctx, stop := context.WithTimeout(t.Context(), time.Second)
		defer stop()
		return subscribe(ctx, "trial") == 1
	})
}

// A reload reaches the streams at their next renewal: the api bucket's
// limit set to 0 turns its token bucket into DENY_ALL, and the stream's
// share of the old limit is given back.
func TestRLQSReload(t *testing.T) {
	auth := lease.NewMemoryAuthority()
	path := writeFile(t, t.TempDir(), "quota.yaml", rlqsYAML)
	e := start(t, Settings{Paths: []string{path}, ReloadInterval: 10 * time.Millisecond,
		Clock: sluice.SystemClock, Authority: auth, ShutdownTimeout: 30 * time.Second})
	c := newRLQSClient(t, 20*time.Millisecond, e.conn)
	api := map[string]string{"name": "api"}
	c.Allow(api, time.Now())
	waitFor(t, "a token bucket", func() bool {
		_, st := c.State(api, time.Now())
		return tokenRate(st) > 0
	})
	writeFile(t, filepath.Dir(path), "quota.yaml", strings.Replace(rlqsYAML, "requests_per_unit: 10000", "requests_per_unit: 0", 1))
	waitFor(t, "DENY_ALL after the reload", func() bool {
		c.Allow(api, time.Now())
		_, st := c.State(api, time.Now())
		return st.GetBlanketRule() == typepb.RateLimitStrategy_DENY_ALL && st.GetTokenBucket() == nil
	})
	waitFor(t, "the old limit's share given back", func() bool {
		hs, err := auth.Holdings(t.Context(), apiKey)
		return err == nil && len(hs) == 0
	})
}

// A bucket id carrying fields the server does not know (a newer proto,
// or padding past the id's bound) is answered with its keys alone: the
// server keeps and sends back no more than the id it bounds.
func TestRLQSUnknownFieldsDropped(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{})
	st, err := rlqspb.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqspb.BucketId{Bucket: map[string]string{"name": "open"}}
	pad := protowire.AppendTag(nil, 99, protowire.BytesType)
	id.ProtoReflect().SetUnknown(protowire.AppendBytes(pad, make([]byte, 32<<10)))
	err = st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	acts := resp.GetBucketAction()
	if len(acts) != 1 || acts[0].GetBucketId().GetBucket()["name"] != "open" {
		t.Fatalf("actions %v, want one for the open bucket", acts)
	}
	if n := len(acts[0].GetBucketId().ProtoReflect().GetUnknown()); n != 0 {
		t.Errorf("the action's bucket id carries %d bytes the server does not know, want none", n)
	}
}

// A stream is one holder of a limit's key however many of its buckets
// the config maps to it (here a share_threshold wildcard): a client that
// splits its traffic into forty buckets takes one of the key's holder
// places and the part of the quota its demand earns, as a client sending
// the same demand in one bucket does, and divides it among its buckets.
func TestRLQSStreamHoldsKeyOnce(t *testing.T) {
	auth := lease.NewMemoryAuthority()
	yaml := rlqsYAML + `  - key: team
    value: t-*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1000}
`
	yaml = strings.Replace(yaml, "rlqs:\n  bucket_keys: [name, env]\n", "", 1) + "rlqs:\n  bucket_keys: [name, env]\n"
	e := start(t, Settings{
		Paths: []string{writeFile(t, t.TempDir(), "quota.yaml", yaml)},
		Clock: sluice.SystemClock, Authority: auth, ShutdownTimeout: 30 * time.Second,
	})
	many := newRLQSClient(t, 50*time.Millisecond, e.conn)
	one := newRLQSClient(t, 50*time.Millisecond, e.conn)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const buckets = 40
	for i := range buckets {
		wg.Go(func() { many.Drive(ctx, map[string]string{"team": fmt.Sprint("t-", i)}, 5) })
	}
	single := map[string]string{"team": "t-one"}
	wg.Go(func() { one.Drive(ctx, single, buckets*5) })
	const key = "rlqs:quota.team_t-*:quota|team=t-*"
	var last string
	begin := time.Now()
	waitFor(t, "one holding per stream, the streams' shares alike", func() bool {
		hs, err := auth.Holdings(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) > 2 {
			t.Fatalf("%d holders of the key for 2 streams", len(hs))
		}
		if len(hs) < 2 {
			return false
		}
		sum := 0.0
		for i := range buckets {
			_, st := many.State(map[string]string{"team": fmt.Sprint("t-", i)}, time.Now())
			sum += max(tokenRate(st), 0)
		}
		_, st := one.State(single, time.Now())
		r := tokenRate(st)
		last = fmt.Sprintf("holdings %d and %d; forty buckets' token buckets %.0f a second in all, the one bucket's %.0f", hs[0].Share, hs[1].Share, sum, r)
		// Both streams ask 200 of 1,000: each holds 200 and a third of
		// the 600 left (one third kept for a newcomer), 400.
		return time.Since(begin) > time.Second && math.Abs(sum-r) <= r/4 && math.Abs(r-400) <= 100
	})
	t.Log(last)
}

// openStream opens an RLQS stream on conn that reports ids, and
// returns it with the server's first response, for the bounds' tests.
func openStream(ctx context.Context, conn grpc.ClientConnInterface, ids ...map[string]string) (rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, *rlqspb.RateLimitQuotaResponse, error) {
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, nil, err
	}
	var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for _, id := range ids {
		us = append(us, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: id}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1})
	}
	// A stream the server refused fails Send with io.EOF; Recv tells why.
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: us}); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	resp, err := st.Recv()
	return st, resp, err
}

// One peer holds at most MaxStreamsPerPeer streams: past it a stream is
// refused with RESOURCE_EXHAUSTED, naming the peer, and once one of its
// streams ends it may open another.
func TestRLQSStreamsPerPeer(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{MaxStreamsPerPeer: 2})
	// An assignment says the server took the stream.
	open := func(ctx context.Context) error {
		_, _, err := openStream(ctx, e.conn, map[string]string{"name": "open"})
		return err
	}
	ctx1, end1 := context.WithCancel(t.Context())
	defer end1()
	for i := range 2 {
		ctx := t.Context()
		if i == 0 {
			ctx = ctx1
		}
		if err := open(ctx); err != nil {
			t.Fatalf("stream %d of 2: %v", i+1, err)
		}
	}
	err := open(t.Context())
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "from 127.0.0.1") {
		t.Fatalf("a third stream from one peer: %v, want RESOURCE_EXHAUSTED naming the peer", err)
	}
	end1()
	waitFor(t, "a stream taken once one of the peer's ended", func() bool {
		return open(t.Context()) == nil
	})
}

// A client opening and closing streams in a loop holds no more of a
// key than it may open streams at once: each stream that ends leaves its
// share counted until its TTL, and a stream from the same peer takes its
// place back, not a place of its own. Else the loop would fill the key's
// holder places and lock every other client out.
func TestRLQSStreamLoopHoldsBounded(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testStreamLoop(t, lease.NewMemoryAuthority()) })
	t.Run("redis", func(t *testing.T) { testStreamLoop(t, newRedisStore(t).Authority()) })
}

func testStreamLoop(t *testing.T, auth lease.Authority) {
	const perPeer = 3
	// Shares live an hour: every stream's would still be counted.
	yaml := strings.Replace(rlqsYAML, "rate_limit: {unit: second, requests_per_unit: 10000}",
		"rate_limit: {unit: second, requests_per_unit: 10000, lease: {renew: 100ms, ttl: 1h}}", 1)
	e := start(t, Settings{
		Paths: []string{writeFile(t, t.TempDir(), "quota.yaml", yaml)},
		Clock: sluice.SystemClock, Authority: auth, RLQS: RLQS{MaxStreamsPerPeer: perPeer}, ShutdownTimeout: 30 * time.Second,
	})
	api := map[string]string{"name": "api"}
	for i := range 30 {
		waitFor(t, fmt.Sprint("stream ", i+1, " assigned"), func() bool {
			ctx, end := context.WithCancel(t.Context())
			defer end()
			_, resp, err := openStream(ctx, e.conn, api)
			if status.Code(err) == codes.ResourceExhausted {
				return false // the peer's last streams have not ended yet
			}
			if err != nil || len(resp.GetBucketAction()) != 1 {
				t.Fatalf("stream %d: %v, %v", i+1, resp, err)
			}
			return true
		})
	}
	hs, err := auth.Holdings(t.Context(), apiKey)
	if err != nil || len(hs) == 0 || len(hs) > perPeer {
		t.Fatalf("after 30 streams, opened and closed one at a time from one peer: %d holders of the key (%v), want 1 to %d", len(hs), err, perPeer)
	}
}

// One peer's streams subscribe to at most MaxBucketsPerPeer buckets in
// all: past it a bucket gets no assignment, whichever of the peer's
// streams asks, and counted refused; a stream that ends gives its places
// back.
func TestRLQSBucketsPerPeer(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{MaxBucketsPerPeer: 3})
	a, b := map[string]string{"name": "api"}, map[string]string{"name": "svc", "env": "a"}
	c, d := map[string]string{"name": "svc", "env": "b"}, map[string]string{"name": "svc", "env": "c"}
	ctx1, end1 := context.WithCancel(t.Context())
	defer end1()
	_, resp, err := openStream(ctx1, e.conn, a, b)
	if err != nil || len(resp.GetBucketAction()) != 2 {
		t.Fatalf("a stream's 2 buckets: %v, %v", resp, err)
	}
	_, resp, err = openStream(t.Context(), e.conn, c, d)
	if err != nil || len(resp.GetBucketAction()) != 1 {
		t.Fatalf("another stream's 2 buckets from the same peer, with a place for one: %v, %v", resp, err)
	}
	if got := counter(t, e.srv, "sluice_rlqs_buckets_total", "result", "refused"); got != 1 {
		t.Errorf("refused %v, want 1", got)
	}
	end1()
	// A stream leaves the list once its buckets are dropped. (A stream
	// whose every bucket is refused is sent nothing, so the test does not
	// ask until then.)
	waitFor(t, "the first stream gone", func() bool { return len(e.srv.rlqsAssignments()) == 1 })
	_, resp, err = openStream(t.Context(), e.conn, a, b)
	if err != nil || len(resp.GetBucketAction()) != 2 {
		t.Fatalf("a third stream's 2 buckets, once the first stream's places are back: %v, %v", resp, err)
	}
}

// A stream that holds no bucket and sends nothing for AbandonAfter ends,
// its place given back: streams opened and left silent cannot hold every
// place for ever. One that reports stays.
func TestRLQSSilentStreamEnds(t *testing.T) {
	e := startRLQS(t, lease.NewMemoryAuthority(), RLQS{MaxStreams: 2, AbandonAfter: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// A reporting stream, which keeps its bucket by reporting faster
	// than AbandonAfter.
	live, _, err := openStream(ctx, e.conn, map[string]string{"name": "open"})
	if err != nil {
		t.Fatal(err)
	}
	silent, err := rlqspb.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := silent.Recv()
		done <- err
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ended := false; !ended; {
		select {
		case err := <-done:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the silent stream ended with %v, want its end (io.EOF)", err)
			}
			ended = true
		case <-tick.C:
			us := []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": "open"}},
				TimeElapsed: durationpb.New(10 * time.Millisecond), NumRequestsAllowed: 1}}
			if err := live.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: us}); err != nil {
				t.Fatalf("the reporting stream: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("a silent stream was not ended in 30s")
		}
	}
	// Its place is free, and the reporting stream still open.
	if _, _, err := openStream(ctx, e.conn, map[string]string{"name": "open"}); err != nil {
		t.Fatalf("a stream after the silent one ended: %v", err)
	}
	if err := live.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota"}); err != nil {
		t.Errorf("the reporting stream was ended: %v", err)
	}
}
