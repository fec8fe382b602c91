package server

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestAuth(t *testing.T) {
	e := start(t, Config{})
	for i := range 3 {
		code, h, _ := get(t, e.base+"/v1/auth", "X-User", "alice")
		if code != 200 || h.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d, Retry-After %q; want 200 without it", i+1, code, h.Get("Retry-After"))
		}
		if got := h.Get("RateLimit-Policy"); got != `"per_user";q=3;w=60, "per_ip";q=1000;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	code, h, body := get(t, e.base+"/v1/auth", "X-User", "alice")
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "50" || !strings.Contains(body, "rate limit exceeded") {
		t.Errorf("4th: %d, Retry-After %q, body %q; want 429, 50", code, h.Get("Retry-After"), body)
	}
	if got := h.Get("RateLimit"); got != `"per_user";r=0;t=50, "per_ip";r=997;t=50` {
		t.Errorf("4th: RateLimit %q", got)
	}
	// Without X-User only the per-IP limit applies.
	if code, _, _ := get(t, e.base+"/v1/auth"); code != 200 {
		t.Errorf("no user: %d, want 200", code)
	}
	// The domain can be named, and must have a forward_auth section.
	if code, _, _ := get(t, e.base+"/v1/auth?domain=test", "X-User", "bob"); code != 200 {
		t.Errorf("?domain=test: %d, want 200", code)
	}
	if code, _, body := get(t, e.base+"/v1/auth?domain=other"); code != 400 || !strings.Contains(body, `domain "other" has no forward_auth section`) {
		t.Errorf("?domain=other: %d %q, want 400", code, body)
	}
	// Envoy's ext_authz: any method, the original path after the prefix.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/v1/auth/items/7?x=1", strings.NewReader("body"))
	req.Header.Set("X-User", "carol")
	if code, _, _ := do(t, req); code != 200 {
		t.Errorf("POST /v1/auth/items/7: %d, want 200", code)
	}
}

func TestAuthDenyStatus(t *testing.T) {
	yaml := strings.Replace(testYAML, "deny_status: 429", "deny_status: 403", 1)
	e := start(t, Config{Paths: []string{writeFile(t, t.TempDir(), "test.yaml", yaml)}})
	for range 3 {
		get(t, e.base+"/v1/auth", "X-User", "dave")
	}
	if code, h, _ := get(t, e.base+"/v1/auth", "X-User", "dave"); code != http.StatusForbidden || h.Get("Retry-After") != "50" {
		t.Errorf("4th: %d, Retry-After %q; want 403, 50", code, h.Get("Retry-After"))
	}
}

func TestAuthNoDomain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", testYAML)
	writeFile(t, dir, "b.yaml", strings.Replace(testYAML, "domain: test", "domain: second", 1))
	e := start(t, Config{Paths: []string{dir}})
	if code, _, body := get(t, e.base+"/v1/auth"); code != 400 || !strings.Contains(body, `["second" "test"]`) {
		t.Errorf("two domains with forward_auth, none named: %d %q, want 400 listing them", code, body)
	}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=second"); code != 200 {
		t.Errorf("?domain=second: %d, want 200", code)
	}
}

func TestClientIP(t *testing.T) {
	s, _ := newServer(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.MustParsePrefix("127.0.0.1/32")}})
	tests := []struct {
		name, remote, xff, realIP, want string
	}{
		{"untrusted peer", "203.0.113.7:5000", "198.51.100.1", "198.51.100.2", "203.0.113.7"},
		{"trusted, X-Forwarded-For", "10.0.0.1:5000", "198.51.100.9, 198.51.100.1, 10.0.0.2", "", "198.51.100.1"},
		{"trusted, X-Real-IP", "127.0.0.1:5000", "", "198.51.100.2", "198.51.100.2"},
		{"trusted, both", "127.0.0.1:5000", "198.51.100.1", "198.51.100.2", "198.51.100.1"},
		{"trusted, bad X-Real-IP", "127.0.0.1:5000", "", "not-an-ip", "127.0.0.1"},
		{"trusted, nothing", "127.0.0.1:5000", "", "", "127.0.0.1"},
		{"IPv6 by /64", "[2001:db8:1:2:3:4:5:6]:5000", "", "", "2001:db8:1:2::/64"},
		{"X-Real-IP IPv6", "127.0.0.1:5000", "", "2001:db8::1", "2001:db8::/64"},
		{"no address", "@unix", "", "", ""},
		{"mapped peer", "[::ffff:127.0.0.1]:5000", "", "198.51.100.2", "198.51.100.2"},
		{"mapped trusted prefix", "10.1.2.3:5000", "", "198.51.100.3", "198.51.100.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			if got := s.clientIP(r); got != tt.want {
				t.Errorf("clientIP = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAuthRequest(t *testing.T) {
	s, _ := newServer(t, Config{})
	tests := []struct {
		name, method, target string
		hdr                  map[string]string
		wantMethod, wantHost string
		wantPath, wantQuery  string
	}{
		{"nginx", "GET", "/v1/auth", map[string]string{"X-Original-Method": "DELETE", "X-Original-URI": "/items/7?force=1", "Host": "sluice"},
			"DELETE", "sluice", "/items/7", "force=1"},
		{"traefik", "GET", "/v1/auth", map[string]string{"X-Forwarded-Method": "PUT", "X-Forwarded-Uri": "/a%20b?q=x", "X-Forwarded-Host": "api.example.com"},
			"PUT", "api.example.com", "/a b", "q=x"},
		{"envoy ext_authz", "POST", "/v1/auth/orders?id=3", map[string]string{"Host": "shop.example.com"},
			"POST", "shop.example.com", "/orders", "id=3"},
		{"envoy, root", "GET", "/v1/auth", nil, "GET", "example.com", "/", ""},
		{"bad URI", "GET", "/v1/auth", map[string]string{"X-Original-URI": "/x?%zz=1&a=b"}, "GET", "example.com", "/x", "a=b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, nil)
			for k, v := range tt.hdr {
				if k == "Host" {
					r.Host = v
					continue
				}
				r.Header.Set(k, v)
			}
			fr := s.authRequest(r)
			if fr.Method != tt.wantMethod || fr.Host != tt.wantHost || fr.Path != tt.wantPath || fr.Query.Encode() != tt.wantQuery {
				t.Errorf("got method %q host %q path %q query %q; want %q %q %q %q",
					fr.Method, fr.Host, fr.Path, fr.Query.Encode(), tt.wantMethod, tt.wantHost, tt.wantPath, tt.wantQuery)
			}
		})
	}
}
