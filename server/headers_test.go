package server

import (
	"net/http"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// headerMap is a response's response_headers_to_add.
func headerMap(resp *rlspb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// HeadersEnvoy sends envoyproxy/ratelimit's three headers for the
// descriptor nearest its limit, or the one over it; nothing else.
func TestHeadersEnvoy(t *testing.T) {
	e := start(t, Settings{ResponseHeaders: HeadersEnvoy})
	ctx := t.Context()
	steps := []struct {
		descs []string
		want  map[string]string
	}{
		// per_user: 3 a minute; t0 is 50s before the minute ends.
		{[]string{"user=a"}, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "50"}},
		// per_ip has 999 left: the user's limit is nearer.
		{[]string{"ip=x", "user=a"}, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "1", "RateLimit-Reset": "50"}},
		{[]string{"user=a", "ip=x"}, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "50"}},
		// Over: the denied descriptor's, although per_ip is listed last.
		{[]string{"user=a", "ip=x"}, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "50"}},
		// A descriptor no limit applies to, or an unlimited one: none.
		{[]string{"nothing=here"}, map[string]string{}},
		{[]string{"path=/free"}, map[string]string{}},
		// The bucket: 10 a burst, refilled 1 per 2s, full again 2s later.
		{[]string{"bucket=b"}, map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "9", "RateLimit-Reset": "2"}},
	}
	for i, st := range steps {
		resp, err := e.rls.ShouldRateLimit(ctx, rlReq("test", 0, st.descs...))
		if err != nil {
			t.Fatal(err)
		}
		if got := headerMap(resp); !equalMaps(got, st.want) {
			t.Errorf("step %d %v: headers %v, want %v", i, st.descs, got, st.want)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The names are configurable, as LIMIT_*_HEADER are; POST /json carries
// the same headers in its body.
func TestHeadersEnvoyNames(t *testing.T) {
	e := start(t, Settings{ResponseHeaders: HeadersEnvoy, HeaderNames: HeaderNames{Limit: "X-Limit", Reset: "X-Reset"}})
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"X-Limit": "3", "RateLimit-Remaining": "2", "X-Reset": "50"}
	if got := headerMap(resp); !equalMaps(got, want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"n"}]}]}`))
	// protojson varies its spacing on purpose: compare without it.
	if code, _, body := do(t, req); code != 200 || !strings.Contains(strings.ReplaceAll(body, " ", ""), `{"key":"RateLimit-Remaining","value":"1"}`) || strings.Contains(body, "RateLimit-Policy") {
		t.Errorf("POST /json: %d %s", code, body)
	}
	for _, bad := range []HeaderNames{{Limit: "Bad Name"}, {Limit: "Same", Reset: "Same"}} {
		if _, err := New(Settings{Store: newStore(t), ResponseHeaders: HeadersEnvoy, HeaderNames: bad}); err == nil {
			t.Errorf("New with HeaderNames %+v: no error", bad)
		}
	}
}

// HeadersNone sends no rate-limit header over RLS; forward auth keeps
// Retry-After on a denial, which nginx's error page needs.
func TestHeadersNone(t *testing.T) {
	for _, style := range []HeaderStyle{HeadersNone, HeadersEnvoy} {
		t.Run(style.String(), func(t *testing.T) {
			e := start(t, Settings{ResponseHeaders: style})
			for i := range 4 {
				resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=none"))
				if err != nil {
					t.Fatal(err)
				}
				h := headerMap(resp)
				if _, ok := h["Retry-After"]; ok || h["RateLimit"] != "" || h["RateLimit-Policy"] != "" || style == HeadersNone && len(h) > 0 {
					t.Errorf("RLS %d: headers %v", i, h)
				}
			}
			for i := range 4 {
				code, h, _ := get(t, e.base+"/v1/auth", "X-User", "nina", "X-Real-IP", testClient)
				if h.Get("RateLimit") != "" || h.Get("RateLimit-Policy") != "" {
					t.Errorf("auth %d: IETF fields %v", i, h)
				}
				if (h.Get("RateLimit-Remaining") != "") != (style == HeadersEnvoy) {
					t.Errorf("auth %d: %s style, RateLimit-Remaining %q", i, style, h.Get("RateLimit-Remaining"))
				}
				if denied := i == 3; (code == http.StatusTooManyRequests) != denied || (h.Get("Retry-After") == "50") != denied {
					t.Errorf("auth %d: %d, Retry-After %q", i, code, h.Get("Retry-After"))
				}
			}
		})
	}
}

func TestParseHeaderStyle(t *testing.T) {
	for _, s := range []HeaderStyle{HeadersIETF, HeadersEnvoy, HeadersNone} {
		if got, err := ParseHeaderStyle(s.String()); err != nil || got != s {
			t.Errorf("ParseHeaderStyle(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseHeaderStyle("x-ratelimit"); err == nil {
		t.Error("ParseHeaderStyle(x-ratelimit): no error")
	}
	if _, err := New(Settings{Store: newStore(t), ResponseHeaders: 7}); err == nil {
		t.Error("New with ResponseHeaders 7: no error")
	}
}
