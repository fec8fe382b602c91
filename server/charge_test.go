package server

import (
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The two charging modes, on a request of two descriptors of which the
// second goes over: all-or-nothing (the default, envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true at its most exact) charges
// neither; ChargePerDescriptor (its default, false) charges the first,
// which is within its limit. The answer is the same in both.
func TestChargingModes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		each     bool
		userLeft uint32 // per_user's remaining in the denied request
		after    uint32 // per_user's remaining for user=erin alone afterwards
		afterOK  bool
	}{
		{"all-or-nothing", false, 1, 0, true},
		{"per descriptor", true, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, Settings{ChargePerDescriptor: tt.each})
			ctx := t.Context()
			// per_user is 3 a minute, org_user 2 a second.
			both := func() *rlspb.RateLimitResponse {
				t.Helper()
				resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=erin", "org=acme,user=erin"))
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			both()
			both()
			resp := both() // org_user denies
			st := resp.GetStatuses()
			if resp.GetOverallCode() != over || st[0].GetCode() != ok || st[1].GetCode() != over {
				t.Fatalf("third: %v, want OVER_LIMIT by the second descriptor only", resp)
			}
			if got := st[0].GetLimitRemaining(); got != tt.userLeft {
				t.Errorf("third: per_user reports %d left, want %d", got, tt.userLeft)
			}
			if got := header(resp, "Retry-After"); got != "1" {
				t.Errorf("third: Retry-After %q, want 1, org_user's wait", got)
			}
			e.clock.Advance(time.Second)
			resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "user=erin"))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetOverallCode() == ok; got != tt.afterOK || resp.GetStatuses()[0].GetLimitRemaining() != tt.after {
				t.Errorf("per_user after the denied request: %v, want OK %v with %d left", resp, tt.afterOK, tt.after)
			}
			// The org_user descriptor was charged twice in either mode.
			e.clock.Advance(time.Second)
			resp, err = e.rls.ShouldRateLimit(ctx, rlReq("test", 0, "org=acme,user=erin"))
			if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 1 {
				t.Errorf("org_user in a new second: %v, %v; want 1 left", resp, err)
			}
		})
	}
}

// Under ChargePerDescriptor every limit is charged, a descriptor's over
// or not, as envoyproxy/ratelimit counts; quota mode decides the answer
// as it does all-or-nothing.
func TestChargePerDescriptorQuota(t *testing.T) {
	path := writeFile(t, t.TempDir(), "per.yaml", `domain: per
descriptors:
  - key: user
    rate_limits:
      - {name: user_minute, unit: minute, requests_per_unit: 5}
      - {name: user_second, unit: second, requests_per_unit: 1}
  - key: ip
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 10}
  - key: model
    quota_mode: true
    rate_limit: {name: model, unit: minute, requests_per_unit: 1}
`)
	e := start(t, Settings{Paths: []string{path}, ChargePerDescriptor: true})
	ctx := t.Context()
	ask := func(descs ...string) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("per", 0, descs...))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ask("user=u", "ip=i")
	resp := ask("user=u", "ip=i") // user_second denies: user_minute and per_ip are charged all the same
	if st := resp.GetStatuses(); resp.GetOverallCode() != over || st[0].GetCode() != over || st[1].GetLimitRemaining() != 8 {
		t.Fatalf("second: %v, want OVER_LIMIT by user, per_ip charged (8 left)", resp)
	}
	e.clock.Advance(time.Second)
	if st := ask("user=u").GetStatuses()[0]; st.GetCode() != ok || st.GetCurrentLimit().GetName() != "user_second" {
		t.Errorf("user in the next second: %v, want OK", st)
	}
	// user_minute has been charged three times, the request over
	// user_second too: its 5th charge passes, the next does not.
	e.clock.Advance(time.Second)
	ask("user=u")
	e.clock.Advance(time.Second)
	if st := ask("user=u").GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 0 || st.GetCurrentLimit().GetName() != "user_minute" {
		t.Errorf("user's 5th charge: %v, want OK with user_minute's last", st)
	}
	e.clock.Advance(time.Second)
	if st := ask("user=u").GetStatuses()[0]; st.GetCode() != over || st.GetCurrentLimit().GetName() != "user_minute" {
		t.Errorf("user's 6th charge: %v, want OVER_LIMIT by user_minute", st)
	}

	// Quota mode: one quota descriptor over does not fail the request
	// while another is within; both other descriptors are charged.
	ask("model=m")
	resp = ask("model=m", "model=n", "ip=j")
	if st := resp.GetStatuses(); resp.GetOverallCode() != ok || st[0].GetCode() != over || st[1].GetCode() != ok || st[2].GetLimitRemaining() != 9 {
		t.Errorf("one quota descriptor over, one within, ip: %v, want OK with model=m over, the others charged", resp)
	}
	// Every quota descriptor over fails it, and ip, within, is charged.
	resp = ask("model=m", "model=n", "ip=j")
	if st := resp.GetStatuses(); resp.GetOverallCode() != over || st[0].GetCode() != over || st[1].GetCode() != over || st[2].GetLimitRemaining() != 8 {
		t.Errorf("every quota descriptor over: %v, want OVER_LIMIT with ip charged (8 left)", resp)
	}
}
