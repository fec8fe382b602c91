package server

import (
	"fmt"
	"net/http"
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
// Authorization as sent: the spellings of one host (its ports among
// them), and of one token, are one limit each.
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
	// A port is the client's to write, and Traefik's Host rule routes it
	// as the host alone: no port makes a new limit.
	for _, host := range []string{"api.example.com:8443", "api.example.com:1", "api.example.com:zzz", "api.example.com:0443"} {
		if code := traefik(host); code != http.StatusTooManyRequests {
			t.Errorf("X-Forwarded-Host %q, past the host's limit: %d, want 429", host, code)
		}
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

// dupAuthYAML keys each request by a query parameter and a header.
const dupAuthYAML = `domain: web
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: t
    descriptors:
      - key: u
        rate_limit: {unit: minute, requests_per_unit: 1}
forward_auth:
  proxy: traefik
  descriptors:
    - entries: [{key: k, from: "query:api_key"}]
    - entries: [{key: h, from: "header:X-Tenant"}]
    - entries: [{key: t, from: "header:X-Team"}, {key: u, from: "header:X-User"}]
`

// A query parameter or header a limit is keyed by, sent twice, is refused
// (400): the application may take the other one, and the client would
// count under a fresh value each time while using the one it is denied.
func TestAuthTwice(t *testing.T) {
	e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "web.yaml", dupAuthYAML)}})
	traefik := func(uri string, hdr ...string) int {
		t.Helper()
		code, _, _ := get(t, e.base+"/v1/auth?domain=web", append([]string{"X-Forwarded-For", testClient, "X-Forwarded-Proto", "https",
			"X-Forwarded-Method", "GET", "X-Forwarded-Uri", uri, "X-Forwarded-Host", "web.example"}, hdr...)...)
		return code
	}
	if code := traefik("/api?api_key=MINE"); code != http.StatusOK {
		t.Fatalf("the first request: %d, want 200", code)
	}
	if code := traefik("/api?api_key=MINE"); code != http.StatusTooManyRequests {
		t.Fatalf("the second request: %d, want 429", code)
	}
	for i := range 3 {
		if code := traefik(fmt.Sprintf("/api?api_key=r%d&api_key=MINE", i)); code != http.StatusBadRequest {
			t.Errorf("api_key twice: %d, want 400", code)
		}
	}
	twice := func(name string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.base+"/v1/auth?domain=web", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range [][2]string{{"X-Forwarded-For", testClient}, {"X-Forwarded-Method", "GET"}, {"X-Forwarded-Uri", "/api"},
			{"X-Forwarded-Host", "web.example"}, {name, "a"}, {name, "b"}} {
			req.Header.Add(kv[0], kv[1])
		}
		code, _, _ := do(t, req)
		return code
	}
	if code := twice("X-Tenant"); code != http.StatusBadRequest {
		t.Errorf("X-Tenant twice: %d, want 400", code)
	}
	// Whatever its place in a descriptor left out for another entry's
	// missing value (X-Team).
	if code := twice("X-User"); code != http.StatusBadRequest {
		t.Errorf("X-User twice, X-Team missing: %d, want 400", code)
	}
	if code := traefik("/api?other=1&other=2", "X-Tenant", "t"); code != http.StatusOK {
		t.Errorf("a parameter no limit reads, twice: %d, want 200", code)
	}
}
