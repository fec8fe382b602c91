package server

import (
	"math"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/teststore"
)

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// perUser is the current_limit of testYAML's per_user.
var perUser = &rlspb.RateLimitResponse_RateLimit{Name: "per_user", RequestsPerUnit: 3, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}

func TestWithinThenOver(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for i, want := range []uint32{2, 1, 0} {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=alice"))
		if err != nil {
			t.Fatal(err)
		}
		wantResp := &rlspb.RateLimitResponse{
			OverallCode: ok,
			Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
				Code: ok, CurrentLimit: perUser, LimitRemaining: want,
				DurationUntilReset: durationpb.New(50 * time.Second),
			}},
		}
		resp.ResponseHeadersToAdd = nil // checked below
		if !proto.Equal(resp, wantResp) {
			t.Fatalf("request %d: %v\nwant %v", i+1, resp, wantResp)
		}
	}
	resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=alice"))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != over || st.GetCode() != over || st.GetLimitRemaining() != 0 ||
		st.GetDurationUntilReset().AsDuration() != 50*time.Second || !proto.Equal(st.GetCurrentLimit(), perUser) {
		t.Fatalf("4th request: %v, want OVER_LIMIT, 0 left, reset in 50s", resp)
	}
	for k, want := range map[string]string{
		"RateLimit-Policy": `"per_user";q=3;w=60`,
		"RateLimit":        `"per_user";r=0;t=50`,
		"Retry-After":      "50",
	} {
		if got := header(resp, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	// Another user is not affected; the next window lets alice in again.
	if resp, _ := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=bob")); resp.GetOverallCode() != ok {
		t.Errorf("bob: %v, want OK", resp)
	}
	e.clock.Advance(50 * time.Second)
	resp, _ = e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=alice"))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 2 || header(resp, "Retry-After") != "" {
		t.Errorf("alice in the next window: %v, want OK with 2 left and no Retry-After", resp)
	}
}

func TestHitsAddend(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	steps := []struct {
		req       *rlspb.RateLimitRequest
		code      rlspb.RateLimitResponse_Code
		remaining uint32
	}{
		{rlReq("test", 2, "user=carol"), ok, 1},
		{rlReq("test", 2, "user=carol"), over, 1}, // denied: not charged
		{withHits(rlReq("test", 5, "user=carol"), 0, 0), ok, 1},
		{rlReq("test", 0, "user=carol"), ok, 0}, // 0 means 1
		{withHits(rlReq("test", 0, "user=carol"), 0, 0), ok, 0},
	}
	for i, s := range steps {
		resp, err := e.rls.ShouldRateLimit(ctx, s.req)
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != s.code || st.GetLimitRemaining() != s.remaining {
			t.Errorf("step %d: %v, want %v with %d left", i, resp, s.code, s.remaining)
		}
	}
}

// Descriptors with hits_addends of their own that differ are still
// decided together: when one denies, the others are not charged.
func TestHitsAddendPerDescriptorAllOrNothing(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	steps := []struct {
		ipHits           uint64
		code             rlspb.RateLimitResponse_Code
		userLeft, ipLeft uint32
	}{
		{600, ok, 2, 400},
		{600, over, 2, 400}, // per_ip denies 600 of 400: per_user is not charged either
		{400, ok, 1, 0},
	}
	for i, st := range steps {
		resp, err := e.rls.ShouldRateLimit(ctx, withHits(rlReq("test", 1, "user=erin", "ip=192.0.2.9"), 1, st.ipHits))
		if err != nil {
			t.Fatal(err)
		}
		ss := resp.GetStatuses()
		if resp.GetOverallCode() != st.code || ss[0].GetLimitRemaining() != st.userLeft || ss[1].GetLimitRemaining() != st.ipLeft {
			t.Errorf("step %d: %v, want %v with %d and %d left", i, resp, st.code, st.userLeft, st.ipLeft)
		}
	}
}

func TestNestedDescriptors(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	orgUser := &rlspb.RateLimitResponse_RateLimit{Name: "org_user", RequestsPerUnit: 2, Unit: rlspb.RateLimitResponse_RateLimit_SECOND}
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "org=acme,user=dan"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != want || !proto.Equal(resp.GetStatuses()[0].GetCurrentLimit(), orgUser) {
			t.Fatalf("request %d: %v, want %v under org_user", i+1, resp, want)
		}
	}
	// A descriptor that stops short of the limit, or goes deeper than the
	// config, has no limit.
	for _, d := range []string{"org=acme", "org=acme,user=dan,device=x", "nothing=here"} {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, d))
		if err != nil {
			t.Fatal(err)
		}
		want := &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}}}
		if !proto.Equal(resp, want) {
			t.Errorf("%s: %v, want %v", d, resp, want)
		}
	}
}

func TestUnlimitedAndUnknownDomain(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for range 10 {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "path=/free"))
		if err != nil {
			t.Fatal(err)
		}
		want := &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok, LimitRemaining: math.MaxUint32}}}
		if !proto.Equal(resp, want) {
			t.Fatalf("unlimited: %v, want %v", resp, want)
		}
	}
	resp, err := e.rls.ShouldRateLimit(ctx, rlReq("nowhere", 1000, "user=alice", "path=/free"))
	if err != nil {
		t.Fatal(err)
	}
	want := &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}, {Code: ok}}}
	if !proto.Equal(resp, want) {
		t.Errorf("unknown domain: %v, want %v", resp, want)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", labelUnknownDomain, "rule", labelNoRule, "result", "within"); got != 2 {
		t.Errorf("decisions for the unknown domain = %v, want 2", got)
	}
}

// All the limits of a request are decided together: a request denied by
// one limit is charged to none.
func TestAllOrNothing(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	both := func() *rlspb.RateLimitResponse {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=erin", "org=acme,user=erin"))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	both()
	both()
	resp := both() // org_user (2/s) denies; per_user (3/min) would allow
	if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetCode() != ok || resp.GetStatuses()[1].GetCode() != over {
		t.Fatalf("third: %v, want OVER_LIMIT by the second descriptor only", resp)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 1 {
		t.Errorf("third: per_user reports %d left, want 1 (uncharged)", got)
	}
	e.clock.Advance(time.Second)
	resp, _ = e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=erin"))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("per_user after the denied request: %v, want OK with 0 left (charged twice, not three times)", resp)
	}
}

func TestShadowRule(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for i := range 3 {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "trial=x"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCode() != ok {
			t.Errorf("request %d: %v, want OK: the rule is in shadow mode", i+1, resp)
		}
		if header(resp, "RateLimit-Policy") != "" || header(resp, "Retry-After") != "" {
			t.Errorf("request %d: headers %v, want none for a shadow rule", i+1, resp.GetResponseHeadersToAdd())
		}
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "test", "rule", "trial", "result", "shadow_over"); got != 2 {
		t.Errorf("shadow_over = %v, want 2", got)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "test", "rule", "trial", "result", "within"); got != 1 {
		t.Errorf("within = %v, want 1", got)
	}
}

// Under --shadow every request is answered OK, but counted and reported
// as it would have been decided.
func TestGlobalShadow(t *testing.T) {
	e := start(t, Settings{Shadow: true})
	ctx := t.Context()
	var resp *rlspb.RateLimitResponse
	for range 5 {
		var err error
		if resp, err = e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=frank")); err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != ok || len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("%v, want OK without headers", resp)
		}
	}
	if st := resp.GetStatuses()[0]; st.GetCode() != over || st.GetLimitRemaining() != 0 {
		t.Errorf("descriptor status %v, want OVER_LIMIT as in envoyproxy/ratelimit", st)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "test", "rule", "per_user", "result", "shadow_over"); got != 2 {
		t.Errorf("shadow_over = %v, want 2", got)
	}
}

func TestReplaces(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for i := range 10 {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=gina", "plan=premium"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()
		if resp.GetOverallCode() != ok || st[0].GetCurrentLimit() != nil || st[1].GetCurrentLimit().GetName() != "premium" ||
			st[1].GetLimitRemaining() != uint32(99-i) {
			t.Fatalf("request %d: %v, want per_user replaced by premium", i+1, resp)
		}
	}
	// Without the premium descriptor, per_user applies and was never charged.
	resp, _ := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=gina"))
	if resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("per_user alone: %v, want 2 left", resp)
	}
}

func TestCurrentLimitUnits(t *testing.T) {
	e := start(t, Settings{})
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "bucket=b"))
	if err != nil {
		t.Fatal(err)
	}
	want := &rlspb.RateLimitResponse_RateLimit{Name: "bucket", RequestsPerUnit: 5, Unit: rlspb.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(10)}
	st := resp.GetStatuses()[0]
	if !proto.Equal(st.GetCurrentLimit(), want) || st.GetLimitRemaining() != 9 || st.GetDurationUntilReset().AsDuration() != 2*time.Second {
		t.Errorf("token bucket 5/10s burst 10: %v, want %v, 9 left, full again in 2s", st, want)
	}
	if got := header(resp, "RateLimit-Policy"); got != `"bucket";q=10;w=20` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

func TestBadRequests(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	long := &ratelimitpb.RateLimitDescriptor{}
	for range MaxEntries + 1 {
		long.Entries = append(long.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: "k"})
	}
	many := rlReq("test", 0)
	for range MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, rlReq("test", 0, "user=x").Descriptors[0])
	}
	override := rlReq("test", 0, "user=hank")
	override.Descriptors[0].Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	negative := rlReq("test", 0, "user=hank")
	negative.Descriptors[0].IsNegativeHits = true
	tests := []struct {
		name string
		req  *rlspb.RateLimitRequest
		want string
	}{
		{"empty domain", rlReq("", 0, "user=hank"), "domain: must not be empty"},
		{"no descriptors", rlReq("test", 0), "descriptors: must not be empty"},
		{"too many descriptors", many, "at most 64"},
		{"no entries", &rlspb.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitpb.RateLimitDescriptor{{}}}, "descriptors[0].entries: must not be empty"},
		{"too many entries", &rlspb.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitpb.RateLimitDescriptor{long}}, "at most 64"},
		{"empty key", rlReq("test", 0, "user=hank", "=v"), "descriptors[1].entries[0].key: must not be empty"},
		{"huge hits_addend", rlReq("test", DefaultMaxHitsAddend+1, "user=hank"), "hits_addend: 1000001 is more than the most allowed"},
		{"huge descriptor hits_addend", withHits(rlReq("test", 0, "user=hank"), 0, math.MaxUint64), "descriptors[0].hits_addend"},
		{"limit override without a unit", override, "descriptors[0].limit.unit: UNKNOWN is not a unit"},
		{"negative hits", negative, "is_negative_hits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.rls.ShouldRateLimit(ctx, tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("error %v, want InvalidArgument saying %q", err, tt.want)
			}
		})
	}
	// None of them charged hank.
	resp, _ := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=hank"))
	if resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("after the bad requests: %v, want 2 left", resp)
	}
}

// Descriptors with different hits are decided one cost at a time.
func TestMixedHits(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	req := func() *rlspb.RateLimitRequest {
		return withHits(rlReq("test", 1, "user=ivy", "org=acme,user=ivy"), 1, 2)
	}
	resp, err := e.rls.ShouldRateLimit(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatuses(); resp.GetOverallCode() != ok || st[0].GetLimitRemaining() != 2 || st[1].GetLimitRemaining() != 0 {
		t.Fatalf("%v, want OK with per_user 2 left and org_user 0 left", resp)
	}
	resp, _ = e.rls.ShouldRateLimit(ctx, req())
	if resp.GetOverallCode() != over || resp.GetStatuses()[1].GetCode() != over {
		t.Errorf("second: %v, want OVER_LIMIT by org_user", resp)
	}
}

// A request the store refuses as given (teststore.Refusing, as Redis
// refuses checks in different Cluster slots) is Internal on gRPC and
// logged, as on HTTP: not a silent pass.
func TestRefusedLoggedOnGRPC(t *testing.T) {
	var logs logBuffer
	e := start(t, Settings{Store: teststore.Refusing{}, Logger: logs.logger()})
	_, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "user=ida"))
	if status.Code(err) != codes.Internal {
		t.Errorf("ShouldRateLimit = %v, want Internal", err)
	}
	if !strings.Contains(logs.String(), "deciding a request") || !strings.Contains(logs.String(), "refused") {
		t.Errorf("log = %q, want the refusal", logs.String())
	}
}

// current_limit.name is the limit's name as the config gives it, and
// empty for a limit the config leaves unnamed, as envoyproxy/ratelimit
// fills it (sluice's generated name stays in the RateLimit fields).
func TestCurrentLimitName(t *testing.T) {
	path := writeFile(t, t.TempDir(), "names.yaml", `domain: names
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: team
    rate_limits:
      - {name: team_burst, unit: second, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 10}
`)
	e := start(t, Settings{Paths: []string{path}})
	ask := func(descs ...string) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("names", 0, descs...))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := ask("user=a", "ip=192.0.2.1")
	if got := resp.GetStatuses()[0].GetCurrentLimit().GetName(); got != "per_user" {
		t.Errorf("named limit: current_limit.name = %q, want per_user", got)
	}
	if cl := resp.GetStatuses()[1].GetCurrentLimit(); cl.GetName() != "" || cl.GetRequestsPerUnit() != 5 {
		t.Errorf("unnamed limit: current_limit = %v, want 5 per MINUTE with no name", cl)
	}
	if got := header(resp, "RateLimit-Policy"); !strings.Contains(got, `"names.ip";q=5`) {
		t.Errorf("RateLimit-Policy = %q, want the unnamed limit under its generated name", got)
	}
	// Of a descriptor's two limits, the one reported says its own: the
	// named one while it has the least left, then the unnamed one.
	if cl := ask("team=t").GetStatuses()[0].GetCurrentLimit(); cl.GetName() != "team_burst" {
		t.Errorf("team, 1 a second left 0: current_limit = %v, want team_burst", cl)
	}
	for range 9 {
		e.clock.Advance(time.Second)
		ask("team=t")
	}
	e.clock.Advance(time.Second)
	if st := ask("team=t").GetStatuses()[0]; st.GetCode() != over || st.GetCurrentLimit().GetName() != "" || st.GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Errorf("team, 10 an hour spent: %v, want OVER_LIMIT under the unnamed 10 per HOUR", st)
	}
}

// The same descriptor twice is one check costing both its hits, whichever
// of them comes first: a peek folded with a cost is charged the cost, and
// two peeks are a peek.
func TestSameDescriptorTwicePeekFirst(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	steps := []struct {
		a, b uint64 // the two descriptors' hits
		code rlspb.RateLimitResponse_Code
		left uint32
	}{
		{0, 2, ok, 1},   // per_user: 3 a minute, 2 taken
		{0, 0, ok, 1},   // two peeks: nothing taken
		{0, 2, over, 1}, // 2 more: over, uncharged
		{1, 0, ok, 0},   // the last one
	}
	for i, s := range steps {
		resp, err := e.rls.ShouldRateLimit(ctx, withHits(withHits(rlReq("test", 0, "user=uma", "user=uma"), 0, s.a), 1, s.b))
		if err != nil {
			t.Fatal(err)
		}
		ss := resp.GetStatuses()
		if resp.GetOverallCode() != s.code || ss[0].GetLimitRemaining() != s.left || ss[1].GetLimitRemaining() != s.left {
			t.Errorf("step %d: %v, want %v with %d left on both", i, resp, s.code, s.left)
		}
	}
}
