package protocol

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clientip"
)

// Each proxy's headers are believed only behind that proxy, and only from
// a trusted peer: the spoofed variant beside the honest one.
func TestAuthRequestByProxy(t *testing.T) {
	trust, err := clientip.Trust(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Service{Trust: trust})
	const (
		proxy     = "10.0.0.2:5000"
		stranger  = "203.0.113.9:5000"
		spoofIP   = "6.6.6.6"
		spoofPath = "/x"
	)
	// The headers a client may send itself, hoping one of them is read.
	spoofs := map[string]string{
		"X-Forwarded-For": spoofIP, "X-Real-IP": spoofIP,
		"X-Original-URI": spoofPath, "X-Forwarded-Uri": spoofPath,
		"X-Original-Method": "PATCH", "X-Forwarded-Method": "PATCH",
		"X-Forwarded-Host": "evil.example",
	}
	tests := []struct {
		name   string
		proxy  config.Proxy
		remote string
		method string
		target string // the auth request's own
		envoy  string // the original target, for Envoy
		set    map[string]string
		// want
		ip, meth, host, path, query string
		err                         string
	}{
		{name: "nginx", proxy: config.Nginx, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Real-IP": "198.51.100.1", "X-Original-URI": "/login?a=1", "X-Original-Method": "POST", "Host": "shop.example"},
			ip:  "198.51.100.1", meth: "POST", host: "shop.example", path: "/login", query: "a=1"},
		{name: "nginx, client's own X-Forwarded-* ignored", proxy: config.Nginx, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Real-IP": "198.51.100.1", "X-Original-URI": "/login", "X-Forwarded-For": spoofIP, "X-Forwarded-Uri": spoofPath, "X-Forwarded-Method": "PATCH", "X-Forwarded-Host": "evil.example", "Host": "shop.example"},
			ip:  "198.51.100.1", meth: "GET", host: "shop.example", path: "/login"},
		{name: "nginx without X-Real-IP", proxy: config.Nginx, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Forwarded-For": spoofIP}, err: "X-Real-Ip: missing"},
		{name: "nginx, X-Real-IP not an address", proxy: config.Nginx, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Real-IP": "not-an-ip"}, err: `X-Real-Ip: "not-an-ip" is not one address`},
		{name: "traefik", proxy: config.Traefik, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.2", "X-Forwarded-Uri": "/a%20b/../login?q=x", "X-Forwarded-Method": "PUT", "X-Forwarded-Host": "api.example"},
			ip:  "198.51.100.2", meth: "PUT", host: "api.example", path: "/login", query: "q=x"},
		{name: "traefik, client's own X-Original-* and X-Real-IP ignored", proxy: config.Traefik, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Forwarded-For": "198.51.100.2", "X-Forwarded-Uri": "/login", "X-Real-IP": spoofIP, "X-Original-URI": spoofPath, "X-Original-Method": "PATCH"},
			ip:  "198.51.100.2", meth: "GET", host: "example.com", path: "/login"},
		{name: "traefik without X-Forwarded-For", proxy: config.Traefik, remote: proxy, method: "GET", target: "/v1/auth",
			set: map[string]string{"X-Real-IP": spoofIP}, err: "X-Forwarded-For: missing"},
		{name: "envoy", proxy: config.Envoy, remote: proxy, method: "DELETE", target: "/v1/auth/api/orders/7?id=3", envoy: "/orders/7?id=3",
			set: map[string]string{"X-Forwarded-For": "198.51.100.3", "Host": "shop.example"},
			ip:  "198.51.100.3", meth: "DELETE", host: "shop.example", path: "/orders/7", query: "id=3"},
		{name: "envoy, every other header ignored", proxy: config.Envoy, remote: proxy, method: "GET", target: "/v1/auth/api/login", envoy: "/login",
			set: map[string]string{"X-Forwarded-For": "6.6.6.6,198.51.100.3", "X-Real-IP": spoofIP, "X-Original-URI": spoofPath, "X-Forwarded-Uri": spoofPath, "X-Original-Method": "PATCH", "X-Forwarded-Method": "PATCH", "X-Forwarded-Host": "evil.example"},
			ip:  "198.51.100.3", meth: "GET", host: "example.com", path: "/login"},
		{name: "envoy without X-Forwarded-For", proxy: config.Envoy, remote: proxy, method: "GET", target: "/v1/auth/api/login", envoy: "/login",
			err: "X-Forwarded-For: missing"},
	}
	for _, p := range []config.Proxy{config.Nginx, config.Traefik, config.Envoy} {
		// From an untrusted peer nothing is believed, and nothing is
		// required.
		tt := tests[0]
		tt.name, tt.proxy, tt.remote, tt.set, tt.target, tt.method = "untrusted peer, "+p.String(), p, stranger, spoofs, "/v1/auth?domain=x", "GET"
		tt.ip, tt.meth, tt.host, tt.path, tt.query = "203.0.113.9", "GET", "example.com", "/v1/auth", "domain=x"
		if p == config.Envoy {
			tt.target, tt.envoy, tt.path, tt.query = "/v1/auth/api/login", "/login", "/login", ""
		}
		tests = append(tests, tt)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, nil)
			r.RemoteAddr = tt.remote
			for k, v := range tt.set {
				if k == "Host" {
					r.Host = v
					continue
				}
				r.Header.Set(k, v)
			}
			fr, err := a.authRequest(r, tt.proxy, tt.envoy)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("authRequest = %+v, %v; want an error %q", fr, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fr.ClientIP != tt.ip || fr.Method != tt.meth || fr.Host != tt.host || fr.Path != tt.path || fr.Query.Encode() != tt.query {
				t.Errorf("got ip %q method %q host %q path %q query %q;\nwant    %q        %q      %q      %q       %q",
					fr.ClientIP, fr.Method, fr.Host, fr.Path, fr.Query.Encode(), tt.ip, tt.meth, tt.host, tt.path, tt.query)
			}
		})
	}
}
