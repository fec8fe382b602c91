package server

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// withLimit sets descriptor i's limit override: rate per unit, times mult
// if not 0.
func withLimit(r *rlspb.RateLimitRequest, i int, rate uint32, unit typepb.RateLimitUnit, mult uint32) *rlspb.RateLimitRequest {
	l := &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rate, Unit: unit}
	if mult != 0 {
		l.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	r.Descriptors[i].Limit = l
	return r
}

// A request's limit override is the descriptor's one limit, as in
// envoyproxy/ratelimit: a fixed window of the override's rate and unit,
// with no name, in place of what the config says of the descriptor, and
// counted apart from the config's limit and from other overrides.
func TestOverrideHonoured(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	ask := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	twoAMinute := &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}
	for i, want := range []struct {
		code rlspb.RateLimitResponse_Code
		left uint32
	}{{ok, 1}, {ok, 0}, {over, 0}} {
		resp := ask(withLimit(rlReq("test", 0, "user=alice"), 0, 2, typepb.RateLimitUnit_MINUTE, 0))
		wantSt := &rlspb.RateLimitResponse_DescriptorStatus{
			Code: want.code, CurrentLimit: twoAMinute, LimitRemaining: want.left,
			DurationUntilReset: durationpb.New(50 * time.Second),
		}
		if st := resp.GetStatuses()[0]; resp.GetOverallCode() != want.code || !proto.Equal(st, wantSt) {
			t.Fatalf("request %d with 2/MINUTE: %v, want %v", i+1, resp, wantSt)
		}
		if i == 2 {
			if got, want := header(resp, "RateLimit-Policy"), `"{override 2/1m}";q=2;w=60`; got != want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, want)
			}
		}
	}
	// Keyed apart: the config's per_user (3 a minute) was never charged,
	// and another override of the same descriptor counts on its own.
	if st := ask(rlReq("test", 0, "user=alice")).GetStatuses()[0]; st.GetLimitRemaining() != 2 || st.GetCurrentLimit().GetName() != "per_user" {
		t.Errorf("per_user after the override's requests: %v, want 2 left", st)
	}
	if st := ask(withLimit(rlReq("test", 0, "user=alice"), 0, 5, typepb.RateLimitUnit_MINUTE, 0)).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 4 {
		t.Errorf("5/MINUTE after 2/MINUTE's requests: %v, want OK with 4 left", st)
	}
	if st := ask(withLimit(rlReq("test", 0, "user=alice"), 0, 2, typepb.RateLimitUnit_MINUTE, 0)).GetStatuses()[0]; st.GetCode() != over {
		t.Errorf("2/MINUTE again: %v, want OVER_LIMIT still", st)
	}
	// And apart per descriptor, as the config's limits are.
	if st := ask(withLimit(rlReq("test", 0, "user=bob"), 0, 2, typepb.RateLimitUnit_MINUTE, 0)).GetStatuses()[0]; st.GetLimitRemaining() != 1 {
		t.Errorf("bob under 2/MINUTE: %v, want 1 left", st)
	}

	// In place of whatever the config says: no limit at all, unlimited,
	// shadow_mode: the override is enforced.
	for _, d := range []string{"nothing=here", "path=/free", "trial=t"} {
		ask(withLimit(rlReq("test", 0, d), 0, 1, typepb.RateLimitUnit_HOUR, 0))
		resp := ask(withLimit(rlReq("test", 0, d), 0, 1, typepb.RateLimitUnit_HOUR, 0))
		if st := resp.GetStatuses()[0]; resp.GetOverallCode() != over || st.GetCode() != over ||
			st.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("%s, second request under 1/HOUR: %v, want OVER_LIMIT", d, resp)
		}
	}
	// An override has no replaces, and a config limit's replaces have no
	// hold on it: per_user stays beside the premium descriptor's override.
	resp := ask(withLimit(rlReq("test", 0, "user=carl", "plan=premium"), 1, 100, typepb.RateLimitUnit_MINUTE, 0))
	if st := resp.GetStatuses(); st[0].GetCurrentLimit().GetName() != "per_user" || st[1].GetCurrentLimit().GetRequestsPerUnit() != 100 {
		t.Errorf("user and premium with an override: %v, want per_user kept and the override on premium", resp)
	}
	// A domain the config lacks has no limit, override or not.
	resp = ask(withLimit(rlReq("nowhere", 0, "user=alice"), 0, 1, typepb.RateLimitUnit_SECOND, 0))
	if want := (&rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}}}); !proto.Equal(resp, want) {
		t.Errorf("unknown domain: %v, want %v", resp, want)
	}

	// unit_multiplier lengthens the period: 1 per 30s, in the window
	// [12:00:00, 12:00:30) at t0.
	resp = ask(withLimit(rlReq("test", 0, "user=dora"), 0, 1, typepb.RateLimitUnit_SECOND, 30))
	want := &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}
	if st := resp.GetStatuses()[0]; !proto.Equal(st.GetCurrentLimit(), want) || st.GetDurationUntilReset().AsDuration() != 20*time.Second {
		t.Errorf("1 per 30 SECOND: %v, want %v resetting in 20s", st, want)
	}

	// Counted under one rule label, whatever the rates.
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "test", "rule", labelOverride, "result", "over"); got != 5 {
		t.Errorf("sluice_decisions_total{rule=%q,result=over} = %v, want 5", labelOverride, got)
	}

	// POST /json takes them too.
	code, body := postJSON(t, e, `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice"}],"limit":{"requests_per_unit":2,"unit":"MINUTE"}}]}`)
	if code != 429 || !strings.Contains(body, `"requestsPerUnit":2`) {
		t.Errorf("POST /json with 2/MINUTE for alice: %d %s, want 429", code, body)
	}
}

// Under RefuseLimitOverrides a request with an override is refused whole,
// naming the field, and charges nothing.
func TestOverrideRefused(t *testing.T) {
	e := start(t, Settings{RefuseLimitOverrides: true})
	req := withLimit(rlReq("test", 0, "user=erin", "user=erin"), 1, 10, typepb.RateLimitUnit_MINUTE, 0)
	_, err := e.rls.ShouldRateLimit(t.Context(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[1].limit") {
		t.Errorf("error %v, want InvalidArgument naming descriptors[1].limit", err)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=erin"))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("after the refused request: %v, %v; want 2 left", resp, err)
	}
}

// An override's values are checked: a bad one is InvalidArgument naming
// the field, and the request charges nothing.
func TestOverrideBadValues(t *testing.T) {
	e := start(t, Settings{})
	tests := []struct {
		name string
		rate uint32
		unit typepb.RateLimitUnit
		mult uint32 // 0: unset
		want string
	}{
		{"no requests", 0, typepb.RateLimitUnit_MINUTE, 0, "descriptors[1].limit.requests_per_unit: must be at least 1"},
		{"too many requests", MaxOverrideRequests + 1, typepb.RateLimitUnit_SECOND, 0, "descriptors[1].limit.requests_per_unit: 1000000001 is more than"},
		{"most requests a uint32 holds", math.MaxUint32, typepb.RateLimitUnit_DAY, 0, "descriptors[1].limit.requests_per_unit"},
		{"no unit", 10, typepb.RateLimitUnit_UNKNOWN, 0, "descriptors[1].limit.unit: UNKNOWN is not a unit"},
		{"unknown unit", 10, typepb.RateLimitUnit(99), 0, "descriptors[1].limit.unit: 99 is not a unit"},
		{"longer than a year", 10, typepb.RateLimitUnit_DAY, 366, "descriptors[1].limit.unit_multiplier"},
		{"two years", 10, typepb.RateLimitUnit_YEAR, 2, "descriptors[1].limit.unit_multiplier"},
		{"huge multiplier", 10, typepb.RateLimitUnit_SECOND, math.MaxUint32, "descriptors[1].limit.unit_multiplier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := withLimit(rlReq("test", 0, "user=fay", "user=fay"), 1, tt.rate, tt.unit, tt.mult)
			_, err := e.rls.ShouldRateLimit(t.Context(), req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("error %v, want InvalidArgument saying %q", err, tt.want)
			}
		})
	}
	// unit_multiplier 0 is no multiplier either.
	req := withLimit(rlReq("test", 0, "user=fay"), 0, 10, typepb.RateLimitUnit_SECOND, 0)
	req.Descriptors[0].Limit.UnitMultiplier = wrapperspb.UInt32(0)
	if _, err := e.rls.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "descriptors[0].limit.unit_multiplier: must be at least 1") {
		t.Errorf("unit_multiplier 0: %v, want InvalidArgument", err)
	}
	// The longest allowed: a year.
	if _, err := e.rls.ShouldRateLimit(t.Context(), withLimit(rlReq("test", 0, "user=gus"), 0, MaxOverrideRequests, typepb.RateLimitUnit_DAY, 365)); err != nil {
		t.Errorf("a billion per 365 days: %v, want it decided", err)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=fay"))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("after the bad requests: %v, %v; want per_user 2 left", resp, err)
	}
}

// A flood of distinct overrides keeps at most MaxOverrideRules rules, and
// a rule dropped and made again keeps its counts.
func TestOverrideFlood(t *testing.T) {
	e := start(t, Settings{})
	ctx := t.Context()
	for rate := uint32(1); rate <= MaxOverrideRules+100; rate++ {
		resp, err := e.rls.ShouldRateLimit(ctx, withLimit(rlReq("test", 0, "user=hal"), 0, rate, typepb.RateLimitUnit_HOUR, 0))
		if err != nil {
			t.Fatalf("override %d/HOUR: %v", rate, err)
		}
		if st := resp.GetStatuses()[0]; st.GetLimitRemaining() != rate-1 {
			t.Fatalf("override %d/HOUR: %v, want %d left: each override counts apart", rate, st, rate-1)
		}
		if n := e.srv.decider.Overrides.Len(); n > MaxOverrideRules {
			t.Fatalf("after %d overrides: %d rules kept, want at most %d", rate, n, MaxOverrideRules)
		}
	}
	if n := e.srv.decider.Overrides.Len(); n != MaxOverrideRules {
		t.Errorf("%d rules kept, want %d", n, MaxOverrideRules)
	}
	// 1/HOUR was the first dropped; made again, it finds its count.
	resp, err := e.rls.ShouldRateLimit(ctx, withLimit(rlReq("test", 0, "user=hal"), 0, 1, typepb.RateLimitUnit_HOUR, 0))
	if err != nil || resp.GetOverallCode() != over {
		t.Errorf("1/HOUR again after the flood: %v, %v; want OVER_LIMIT", resp, err)
	}
	// The metrics did not grow with the rates.
	mfs, err := e.srv.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_decisions_total" {
			var rules []string
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "rule" {
						rules = append(rules, l.GetValue())
					}
				}
			}
			if len(rules) > 3 {
				t.Errorf("sluice_decisions_total has %d series, rules %s; want the 3 of %q", len(rules), fmt.Sprint(rules), labelOverride)
			}
		}
	}
}

// One override rate used in two domains is one rule, counted in the
// metrics under each request's own domain, over gRPC and POST /json.
func TestOverrideMetricsPerDomain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	writeFile(t, dir, "b.yaml", "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	e := start(t, Settings{Paths: []string{dir}})
	if _, err := e.rls.ShouldRateLimit(t.Context(), withLimit(rlReq("a", 0, "user=ann"), 0, 10, typepb.RateLimitUnit_MINUTE, 0)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.rls.ShouldRateLimit(t.Context(), withLimit(rlReq("b", 0, "user=bo"), 0, 10, typepb.RateLimitUnit_MINUTE, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := postJSON(t, e, `{"domain":"b","descriptors":[{"entries":[{"key":"user","value":"bo"}],"limit":{"requests_per_unit":10,"unit":"MINUTE"}}]}`); code != 200 {
		t.Fatalf("POST /json: %d %s", code, body)
	}
	if n := e.srv.decider.Overrides.Len(); n != 1 {
		t.Errorf("%d override rules, want the one both domains share", n)
	}
	for _, want := range []struct {
		domain string
		n      float64
	}{{"a", 1}, {"b", 3}} {
		if got := counter(t, e.srv, "sluice_decisions_total", "domain", want.domain, "rule", labelOverride, "result", resultWithin); got != want.n {
			t.Errorf("sluice_decisions_total{domain=%q,rule=%q} = %v, want %v", want.domain, labelOverride, got, want.n)
		}
	}
}
