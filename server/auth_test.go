package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// testClient is the client's address that nginx reports in X-Real-IP, as
// the auth requests to testYAML's domain (proxy: nginx) carry it.
const testClient = "198.51.100.7"

func TestAuth(t *testing.T) {
	e := start(t, Settings{})
	for i := range 3 {
		code, h, _ := get(t, e.base+"/v1/auth", "X-User", "alice", "X-Real-IP", testClient)
		if code != 200 || h.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d, Retry-After %q; want 200 without it", i+1, code, h.Get("Retry-After"))
		}
		if got := h.Get("RateLimit-Policy"); got != `"per_user";q=3;w=60, "per_ip";q=1000;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	code, h, body := get(t, e.base+"/v1/auth", "X-User", "alice", "X-Real-IP", testClient)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "50" || !strings.Contains(body, "quota-exceeded") {
		t.Errorf("4th: %d, Retry-After %q, body %q; want 429, 50", code, h.Get("Retry-After"), body)
	}
	if got := h.Get("RateLimit"); got != `"per_user";r=0;t=50, "per_ip";r=997;t=50` {
		t.Errorf("4th: RateLimit %q", got)
	}
	// Without X-User only the per-IP limit applies.
	if code, _, _ := get(t, e.base+"/v1/auth", "X-Real-IP", testClient); code != 200 {
		t.Errorf("no user: %d, want 200", code)
	}
	// The domain can be named, and must have a forward_auth section; the
	// answer names no other domain.
	if code, _, _ := get(t, e.base+"/v1/auth?domain=test", "X-User", "bob", "X-Real-IP", testClient); code != 200 {
		t.Errorf("?domain=test: %d, want 200", code)
	}
	if code, _, body := get(t, e.base+"/v1/auth?domain=other", "X-Real-IP", testClient); code != 400 ||
		!strings.Contains(body, `domain "other" has no forward_auth section`) || strings.Contains(body, `"test"`) {
		t.Errorf("?domain=other: %d %q, want 400 naming no other domain", code, body)
	}
	// A trusted proxy that does not say who the client is fails loudly:
	// keyed by its own address, every client would share one bucket.
	if code, _, body := get(t, e.base+"/v1/auth", "X-User", "erin"); code != 400 || !strings.Contains(body, "X-Real-Ip: missing") {
		t.Errorf("no X-Real-IP from a trusted peer: %d %q, want 400 naming the header", code, body)
	}
}

func TestAuthDenyStatus(t *testing.T) {
	yaml := strings.Replace(testYAML, "deny_status: 429", "deny_status: 403", 1)
	e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "test.yaml", yaml)}})
	for range 3 {
		get(t, e.base+"/v1/auth", "X-User", "dave", "X-Real-IP", testClient)
	}
	if code, h, _ := get(t, e.base+"/v1/auth", "X-User", "dave", "X-Real-IP", testClient); code != http.StatusForbidden || h.Get("Retry-After") != "50" {
		t.Errorf("4th: %d, Retry-After %q; want 403, 50", code, h.Get("Retry-After"))
	}
}

func TestAuthNoDomain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", testYAML)
	writeFile(t, dir, "b.yaml", strings.Replace(testYAML, "domain: test", "domain: second", 1))
	e := start(t, Settings{Paths: []string{dir}})
	if code, _, body := get(t, e.base+"/v1/auth", "X-Real-IP", testClient); code != 400 ||
		!strings.Contains(body, "/v1/auth?domain=NAME") || strings.Contains(body, "second") || strings.Contains(body, "test") {
		t.Errorf("two domains with forward_auth, none named: %d %q, want 400 naming neither", code, body)
	}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=second", "X-Real-IP", testClient); code != 200 {
		t.Errorf("?domain=second: %d, want 200", code)
	}
}

// authYAML is a domain for proxy that limits each path to requests a
// minute.
func authYAML(domain, proxy string, requests int) string {
	return fmt.Sprintf(`domain: %[1]s
descriptors:
  - key: path
    rate_limit: {name: per_path, unit: minute, requests_per_unit: %[3]d}
  - key: ip
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 1000}
forward_auth:
  proxy: %[2]s
  descriptors:
    - entries:
        - {key: path, from: path}
    - entries:
        - {key: ip, from: client_ip}
`, domain, proxy, requests)
}

func authEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "envoy.yaml", authYAML("api", "envoy", 1))
	writeFile(t, dir, "traefik.yaml", authYAML("web", "traefik", 1))
	writeFile(t, dir, "nginx.yaml", authYAML("site", "nginx", 1))
	writeFile(t, dir, "lax.yaml", authYAML("lax", "envoy", 9))
	return start(t, Settings{Paths: []string{dir}})
}

// With Envoy's ext_authz the domain is the segment after /v1/auth, from
// the path_prefix Envoy is configured with. The query is the client's,
// and a domain in it is never obeyed.
func TestAuthEnvoyDomain(t *testing.T) {
	e := authEnv(t)
	xff := []string{"X-Forwarded-For", testClient}
	if code, _, _ := get(t, e.base+"/v1/auth/api/login", xff...); code != 200 {
		t.Fatalf("first: %d, want 200", code)
	}
	for _, target := range []string{
		"/v1/auth/api/login?domain=lax",
		"/v1/auth/api/login?domain=lax&domain=lax",
		"/v1/auth/api//login",
		"/v1/auth/api/x/../login",
		"/v1/auth/api/./login",
		"/v1/auth/api/%6Cogin",
		"/v1/auth/api/login/",
		"/v1/auth/api/login;jsessionid=1",
		"/v1/auth/api/..;/login",
	} {
		if code, h, _ := get(t, e.base+target, xff...); code != http.StatusTooManyRequests || !strings.Contains(h.Get("RateLimit-Policy"), "q=1;") {
			t.Errorf("%s: %d %q, want 429 from domain api's per_path", target, code, h.Get("RateLimit-Policy"))
		}
	}
	// %2F is not a separator: a different path.
	if code, _, _ := get(t, e.base+"/v1/auth/api/a%2Flogin", "X-Forwarded-For", "198.51.100.8"); code != 200 {
		t.Errorf("/a%%2Flogin: %d, want 200", code)
	}
	for _, tt := range []struct{ target, want string }{
		{"/v1/auth?domain=api", `domain "api" is for Envoy's ext_authz: set its http_service path_prefix to /v1/auth/api`},
		{"/v1/auth/site/login", `domain "site" is for nginx: call exactly /v1/auth`},
		{"/v1/auth/web/login", `domain "web" is for traefik: call exactly /v1/auth`},
		{"/v1/auth/nope/login", `domain "nope" has no forward_auth section`},
		{"/v1/auth/", `empty or malformed domain segment`},
		{"/v1/auth//api/login", `empty or malformed domain segment`},
	} {
		code, _, body := get(t, e.base+tt.target, xff...)
		if code != 400 || !strings.Contains(body, tt.want) || strings.Contains(body, "lax") {
			t.Errorf("%s: %d %q, want 400 %q naming no other domain", tt.target, code, body, tt.want)
		}
	}
}

// Each proxy's headers are believed only behind that proxy, and only from
// a trusted peer: the spoofed variant beside the honest one.
func TestAuthRequestByProxy(t *testing.T) {
	s, _ := newServer(t, Settings{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}})
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
			fr, err := s.authRequest(r, tt.proxy, tt.envoy)
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

// Behind Traefik, a client's X-Original-URI does not move it off the
// limit of the path Traefik reports; behind nginx, neither does its
// X-Forwarded-Uri. End to end, through the HTTP handler.
func TestAuthSpoofedPath(t *testing.T) {
	e := authEnv(t)
	traefik := []string{"X-Forwarded-For", testClient, "X-Forwarded-Uri", "/login"}
	nginx := []string{"X-Real-IP", "198.51.100.9", "X-Original-URI", "/login"}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=web", traefik...); code != 200 {
		t.Fatalf("traefik, first: %d", code)
	}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=web", append(traefik, "X-Original-URI", "/x")...); code != 429 {
		t.Errorf("traefik, X-Original-URI: /x from the client: %d, want 429", code)
	}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=site", nginx...); code != 200 {
		t.Fatalf("nginx, first: %d", code)
	}
	if code, _, _ := get(t, e.base+"/v1/auth?domain=site", append(nginx, "X-Forwarded-Uri", "/x", "X-Forwarded-For", "6.6.6.6")...); code != 429 {
		t.Errorf("nginx, X-Forwarded-Uri: /x from the client: %d, want 429", code)
	}
}

func TestCleanPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/login", "/login"},
		{"", "/"},
		{"/", "/"},
		{"login", "/login"},
		{"//login", "/login"},
		{"/a//b///c", "/a/b/c"},
		{"/./login", "/login"},
		{"/x/../login", "/login"},
		{"/../../login", "/login"},
		{"/a/b/../../../login", "/login"},
		{"/login/", "/login"},
		{"/login/.", "/login"},
		{"/login;jsessionid=ab", "/login"},
		{"/..;/login", "/login"},
		{"/a;x/b;y", "/a/b"},
		{"/%6Cogin", "/login"},
		{"/%2E%2E/login", "/login"},
		{"/%2e/login", "/login"},
		{"/%7Euser", "/~user"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%20b", "/a%20b"},
		{"/100%", "/100%25"},
		{"/%zz", "/%25zz"},
		{"/%4", "/%254"},
		{"%%370", "/%2570"},
		{"/login#frag", "/login"},
		{"http://evil.example/login", "/login"},
		{"HTTPS://evil.example", "/"},
		{"/a/http://b/c", "/a/http:/b/c"},
		{"/LOGIN", "/LOGIN"},
		{"/login.", "/login"},
		{"/login...", "/login"},
		{"/login%2e", "/login"},
		{"/login%2E.", "/login"},
		{"/a./b../c", "/a/b/c"},
		{"/.../login", "/login"},
		{"/login.json", "/login.json"},
		{`/login\`, "/login"},
		{`\login`, "/login"},
		{`/a\..\login`, "/login"},
		{"/login%5C", "/login"},
		{"/login%5c", "/login"},
		{"/a%5Cb", "/a/b"},
		{"/a%255Cb", "/a%255Cb"},
	} {
		if got := cleanPath(tt.in); got != tt.want {
			t.Errorf("cleanPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/a/../b", "//x", "/%2e%2E/", "/a;b/c", "http://h/p", "%%370"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := cleanPath(p)
		if !strings.HasPrefix(c, "/") || strings.Contains(c, "//") || (len(c) > 1 && strings.HasSuffix(c, "/")) {
			t.Fatalf("cleanPath(%q) = %q: not one clean spelling", p, c)
		}
		for seg := range strings.SplitSeq(c, "/") {
			if seg == "." || seg == ".." || strings.Contains(seg, ";") || strings.HasSuffix(seg, ".") {
				t.Fatalf("cleanPath(%q) = %q holds segment %q", p, c, seg)
			}
		}
		if strings.Contains(c, `\`) || strings.Contains(c, "%5C") {
			t.Fatalf("cleanPath(%q) = %q holds a backslash", p, c)
		}
		if again := cleanPath(c); again != c {
			t.Fatalf("cleanPath(%q) = %q, but cleanPath of that is %q", p, c, again)
		}
		f := foldPath(c)
		if cleanPath(f) != f || foldPath(f) != f || strings.ToLower(f) != strings.ToLower(c) {
			t.Fatalf("foldPath(%q) = %q: not a clean path in one case", c, f)
		}
		for i := 0; i < len(f); i++ {
			if f[i] == '%' && strings.ToUpper(f[i:i+3]) != f[i:i+3] {
				t.Fatalf("foldPath(%q) = %q: escape %q not upper case", c, f, f[i:i+3])
			}
		}
	})
}

func TestFoldPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/LOGIN", "/login"},
		{"/Login/Step2", "/login/step2"},
		{"/a%2Fb", "/a%2Fb"},
		{"/A%2FB%20C", "/a%2Fb%20c"},
		{"/%C3%89T%C3%89", "/%C3%89t%C3%89"}, // ASCII letters only
	} {
		if got := foldPath(tt.in); got != tt.want {
			t.Errorf("foldPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalHost(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM", "api.example.com"},
		{"api.example.com.", "api.example.com"},
		{"api.example.com:443", "api.example.com"},
		{"api.example.com:80", "api.example.com"},
		{"API.example.com.:443", "api.example.com"},
		{"api.example.com:8443", "api.example.com:8443"},
		{"[::1]:443", "[::1]"},
		{"[2001:DB8::1]:8443", "[2001:db8::1]:8443"},
		{"203.0.113.7:80", "203.0.113.7"},
		{"[::1]", "[::1]"},
		{"::1", "[::1]"},
		{"2001:db8::1", "[2001:db8::1]"},
		{"example.com:", "example.com"},
		{"", ""},
	} {
		if got := canonicalHost(tt.in); got != tt.want {
			t.Errorf("canonicalHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"API.example.com.:443", "[::1]:8443", "::1", "a:b:c", "[", "]:", ":", "a..", "[a].:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		c := canonicalHost(h)
		if again := canonicalHost(c); again != c {
			t.Fatalf("canonicalHost(%q) = %q, but canonicalHost of that is %q", h, c, again)
		}
	})
}

// spellingYAML limits each host and each bearer token, as Traefik's
// ForwardAuth passes them.
const spellingYAML = `domain: web
descriptors:
  - key: host
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: token
    secret: true
    rate_limit: {unit: minute, requests_per_unit: 3}
forward_auth:
  proxy: traefik
  descriptors:
    - entries: [{key: host, from: host}]
    - entries: [{key: token, from: "header:Authorization"}]
`

// Traefik passes the client's Host in X-Forwarded-Host and its
// Authorization as sent: the spellings of one host, and of one token,
// are one limit each.
func TestAuthTraefikSpellings(t *testing.T) {
	e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "web.yaml", spellingYAML)}})
	traefik := func(host string, hdr ...string) int {
		t.Helper()
		code, _, _ := get(t, e.base+"/v1/auth?domain=web", append([]string{"X-Forwarded-For", testClient, "X-Forwarded-Proto", "https",
			"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/", "X-Forwarded-Host", host}, hdr...)...)
		return code
	}
	for i, host := range []string{"API.example.com", "api.example.com.", "api.example.com:443", "Api.Example.Com.:80"} {
		if code, want := traefik(host), i < 3; (code == 200) != want {
			t.Errorf("X-Forwarded-Host %q (request %d): %d, want allowed %v", host, i+1, code, want)
		}
	}
	if code := traefik("api.example.com:8443"); code != 200 {
		t.Errorf("X-Forwarded-Host on another port: %d, want 200", code)
	}
	for i, auth := range []string{"Bearer T0K", "bearer T0K", "BEARER  T0K", "Bearer    T0K"} {
		if code, want := traefik(fmt.Sprintf("h%d.example", i), "Authorization", auth), i < 3; (code == 200) != want {
			t.Errorf("Authorization %q (request %d): %d, want allowed %v", auth, i+1, code, want)
		}
	}
}

// quotaAuthYAML is a domain served by Traefik's ForwardAuth: each client
// address has 5 requests a minute, and a request with an API key is
// limited by its key too.
const quotaAuthYAML = `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api_key
    secret: true
    rate_limit: {unit: minute, requests_per_unit: 100}
forward_auth:
  proxy: traefik
  descriptors:
    - entries:
        - key: remote_address
          from: client_ip
    - entries:
        - key: api_key
          from: header:X-API-Key
`

// Quota mode and forward auth do not go together: with every descriptor
// in quota mode, a client that sends a fresh X-API-Key on each request
// would never have all its descriptors over, and so would pass its
// address's limit without end. A server in quota mode refuses the domain
// at start, and a reload that puts a descriptor of it in quota mode is
// refused while the last good config serves.
func TestAuthQuotaModeRefused(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "web.yaml", quotaAuthYAML)
	_, err := New(Settings{Paths: []string{path}, QuotaMode: true, Store: newStore(t)})
	if err == nil || !strings.Contains(err.Error(), path+":9: forward_auth:") || !strings.Contains(err.Error(), `domain "web"`) {
		t.Errorf("New in quota mode with forward auth = %v, want an error naming domain web at %s:9", err, path)
	}
	if _, err := New(Settings{Policy: config.Default(), QuotaMode: true, Store: newStore(t)}); err == nil || !strings.Contains(err.Error(), `domain "sluice"`) {
		t.Errorf("New in quota mode with the built-in policy (forward auth for nginx) = %v, want domain sluice refused", err)
	}

	e := start(t, Settings{Paths: []string{path}, ReloadInterval: -1})
	writeFile(t, dir, "web.yaml", strings.Replace(quotaAuthYAML, "  - key: remote_address\n", "  - key: remote_address\n    quota_mode: true\n", 1))
	if err := e.srv.Reload(t.Context()); err == nil || !strings.Contains(err.Error(), path+":3: descriptors[0].quota_mode:") {
		t.Errorf("reload to quota_mode under forward auth = %v, want refused at %s:3", err, path)
	}
	// Traefik's requests from one address, each with a key of its own:
	// the address's limit holds.
	var passed int
	for i := range 20 {
		code, _, _ := get(t, e.base+"/v1/auth?domain=web", "X-Forwarded-For", testClient, "X-Forwarded-Method", "GET",
			"X-Forwarded-Uri", "/", "X-Forwarded-Host", "shop.example", "X-API-Key", fmt.Sprintf("key-%d", i))
		if code == http.StatusOK {
			passed++
		}
	}
	if passed != 5 {
		t.Errorf("20 requests from one address with fresh keys: %d passed, want the address's 5", passed)
	}
}
