package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/config"
)

// ask sends a request for the client address ip, hits hits, over gRPC or
// POST /json, and returns the answer.
func ask(t *testing.T, e *env, overJSON bool, ip string, hits uint32) *rlspb.RateLimitResponse {
	t.Helper()
	if !overJSON {
		resp, err := e.rls.ShouldRateLimit(t.Context(), withHits(rlReq("sluice", 1, "remote_address="+ip), 0, uint64(hits)))
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	code, out := postJSON(t, e, fmt.Sprintf(`{"domain": "sluice", "descriptors": [{"entries": [{"key": "remote_address", "value": %q}], "hits_addend": %d}]}`, ip, hits))
	if code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Fatalf("POST /json: %d %s", code, out)
	}
	resp := new(rlspb.RateLimitResponse)
	if err := protojson.Unmarshal([]byte(out), resp); err != nil {
		t.Fatalf("POST /json: the body does not parse as a RateLimitResponse: %v\n%s", err, out)
	}
	return resp
}

// A status's current_limit, limit_remaining and duration_until_reset are
// one limit's: of the built-in policy's per_ip (a token bucket of 10/s,
// bursts of 20) and per_ip_hourly (1000 an hour), the first that denied,
// else the one with the least remaining, a tie going to per_ip, which the
// config lists first. Under WholeSecondResets the reset is in whole
// seconds, rounded up, at least one; else it keeps its precision. gRPC and
// POST /json answer alike.
func TestStatusIsOneLimit(t *testing.T) {
	type step struct {
		advance   time.Duration
		hits      uint32
		over      bool
		limit     string
		remaining uint32
		reset     time.Duration // as sluice's own mode answers it
		whole     time.Duration // under WholeSecondResets
	}
	// t0 is 12:00:10: the hour's window ends 3590s later.
	steps := []step{
		{hits: 1, limit: "per_ip", remaining: 19, reset: 100 * time.Millisecond, whole: time.Second},
		// 49 × 20 more hits, 2s apart: 981 of the hour spent, the
		// bucket empty; 1.9s later it holds 19, as many as the hour has
		// left.
		{advance: 2 * time.Second, hits: 20, limit: "per_ip", remaining: 0, reset: 2 * time.Second, whole: 2 * time.Second},
		{advance: 1900 * time.Millisecond, hits: 0, limit: "per_ip", remaining: 19, reset: 100 * time.Millisecond, whole: time.Second},
		{hits: 1, limit: "per_ip", remaining: 18, reset: 200 * time.Millisecond, whole: time.Second},
		{advance: 2 * time.Second, hits: 1, limit: "per_ip_hourly", remaining: 17, reset: 3488100 * time.Millisecond, whole: 3489 * time.Second},
		// per_ip would allow 18 (1 left); the hour denies them.
		{hits: 18, over: true, limit: "per_ip_hourly", remaining: 17, reset: 3488100 * time.Millisecond, whole: 3489 * time.Second},
		// Both deny 20: per_ip is first.
		{hits: 20, over: true, limit: "per_ip", remaining: 19, reset: 100 * time.Millisecond, whole: time.Second},
	}
	for _, overJSON := range []bool{false, true} {
		for _, whole := range []bool{false, true} {
			t.Run(fmt.Sprintf("json=%v/whole=%v", overJSON, whole), func(t *testing.T) {
				e := start(t, Settings{Policy: config.Default(), WholeSecondResets: whole})
				const ip = "192.0.2.7"
				check := func(i int, s step) {
					t.Helper()
					resp := ask(t, e, overJSON, ip, s.hits)
					st := resp.GetStatuses()[0]
					wantCode := rlspb.RateLimitResponse_OK
					if s.over {
						wantCode = rlspb.RateLimitResponse_OVER_LIMIT
					}
					wantReset := s.reset
					if whole {
						wantReset = s.whole
					}
					got := fmt.Sprintf("%v %s %d %v", st.GetCode(), st.GetCurrentLimit().GetName(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
					want := fmt.Sprintf("%v %s %d %v", wantCode, s.limit, s.remaining, wantReset)
					if got != want {
						t.Fatalf("step %d (hits %d): status %s, want %s", i, s.hits, got, want)
					}
				}
				for i, s := range steps {
					e.clock.Advance(s.advance)
					check(i, s)
					if i == 1 {
						for range 48 {
							e.clock.Advance(s.advance)
							check(i, s)
						}
					}
				}
			})
		}
	}
}
