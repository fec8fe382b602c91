package rlqstest

import (
	"testing"
	"time"

	quotapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var (
	t0        = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	apiBucket = map[string]string{"name": "api"}
	deny      = &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_BlanketRule_{BlanketRule: typepb.RateLimitStrategy_DENY_ALL}}
)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// tokens is a token bucket of n tokens refilled n a second.
func tokens(n uint32) *typepb.RateLimitStrategy {
	return &typepb.RateLimitStrategy{Strategy: &typepb.RateLimitStrategy_TokenBucket{TokenBucket: &typepb.TokenBucket{
		MaxTokens: n, TokensPerFill: wrapperspb.UInt32(n), FillInterval: durationpb.New(time.Second)}}}
}

func assignment(st *typepb.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse {
	return &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqspb.BucketId{Bucket: apiBucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: st}},
	}}}
}

func newClient(set *quotapb.RateLimitQuotaBucketSettings) *Client {
	return New(Config{Domain: "d", Bucket: func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) { return apiBucket, set }})
}

// The client's states as the filter's docs give them, in explicit time:
// no assignment (its fallback), a report at once on the first request and
// on a new assignment, the assignment's token bucket (starting full),
// an unchanged strategy extending it without a report, its expiry into
// reuse_last_assignment, abandonment at the expired behaviour's timeout,
// and a zero TTL expiring at once.
func TestClientStates(t *testing.T) {
	c := newClient(&quotapb.RateLimitQuotaBucketSettings{
		ReportingInterval: durationpb.New(time.Second),
		NoAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_NoAssignmentBehavior{
			NoAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_NoAssignmentBehavior_FallbackRateLimit{FallbackRateLimit: deny}},
		ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{
			ExpiredAssignmentBehaviorTimeout: durationpb.New(time.Second),
			ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment_{
				ReuseLastAssignment: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment{}},
		},
	})
	state := func(ms int, want string) {
		t.Helper()
		if s, _ := c.State(apiBucket, at(ms)); s != want {
			t.Fatalf("at %dms: state %q, want %q", ms, s, want)
		}
	}
	reported := func(ms int, want bool, allowed, denied uint64) {
		t.Helper()
		m := c.Reports(at(ms))
		if (m != nil) != want {
			t.Fatalf("at %dms: report %v, want one: %v", ms, m, want)
		}
		if m != nil {
			u := m.GetBucketQuotaUsages()[0]
			if u.GetNumRequestsAllowed() != allowed || u.GetNumRequestsDenied() != denied {
				t.Fatalf("at %dms: reported %d allowed, %d denied; want %d, %d", ms, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), allowed, denied)
			}
		}
	}
	state(0, Abandoned)
	if c.Allow(nil, at(0)) {
		t.Fatal("no assignment: allowed, want the fallback's DENY_ALL")
	}
	state(0, NoAssignment)
	reported(0, true, 0, 1)
	reported(10, false, 0, 0)

	c.Apply(assignment(tokens(2), 500*time.Millisecond), at(20))
	state(20, Active)
	reported(20, true, 0, 0)                         // a new assignment is reported at once
	for i, want := range []bool{true, true, false} { // it starts full
		if got := c.Allow(nil, at(20)); got != want {
			t.Fatalf("request %d at 20ms: %v, want %v", i, got, want)
		}
	}
	c.Apply(assignment(tokens(2), 500*time.Millisecond), at(400)) // the same: extended
	reported(400, false, 0, 0)
	state(800, Active)
	state(900, Expired) // 400ms + 500ms
	if !c.Allow(nil, at(1500)) {
		t.Error("expired, reusing the last assignment: denied, want its token bucket")
	}
	state(1899, Expired)
	state(1900, Abandoned) // the expired behaviour's timeout

	c.Allow(nil, at(2000))
	c.Apply(assignment(tokens(5), 0), at(2010)) // a zero TTL expires at once
	state(2010, Expired)
}

// An AbandonAction erases the bucket; without an expired behaviour an
// expired assignment abandons the bucket at once; a bucket's usage is
// reported every reporting_interval.
func TestClientAbandon(t *testing.T) {
	c := newClient(&quotapb.RateLimitQuotaBucketSettings{ReportingInterval: durationpb.New(100 * time.Millisecond)})
	c.Allow(nil, at(0))
	if m := c.Reports(at(0)); m == nil {
		t.Fatal("no report on the first request")
	}
	c.Allow(nil, at(50))
	if m := c.Reports(at(99)); m != nil {
		t.Fatalf("a report before the reporting interval: %v", m)
	}
	if m := c.Reports(at(100)); m.GetBucketQuotaUsages()[0].GetNumRequestsAllowed() != 1 {
		t.Fatalf("the report at the interval: %v, want 1 allowed", m)
	}
	c.Apply(&rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{{
		BucketId:     &rlqspb.BucketId{Bucket: apiBucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}}}, at(150))
	if s, _ := c.State(apiBucket, at(150)); s != Abandoned {
		t.Fatalf("after AbandonAction: %q, want %q", s, Abandoned)
	}
	c.Allow(nil, at(200))
	c.Apply(assignment(tokens(1), 100*time.Millisecond), at(200))
	if s, _ := c.State(apiBucket, at(300)); s != Abandoned {
		t.Fatalf("expired with no expired behaviour: %q, want %q", s, Abandoned)
	}
}
