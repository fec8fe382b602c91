package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The example's files, as committed.
const (
	nginxConf  = "../examples/nginx/nginx.conf"
	nginxRules = "../examples/nginx/sluice.yaml"
)

// findNginx returns the nginx binary, or skips the test without one.
func findNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("nginx is not installed (Debian: apt-get install nginx; scripts/test installs it): skipping the real-nginx test")
	return ""
}

// freePort returns a loopback address with a port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l := listen(t)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// renderNginx returns the example nginx.conf with its addresses replaced,
// and its error log in prefix.
func renderNginx(t *testing.T, prefix, sluiceAddr, appAddr, listenAddr string) string {
	t.Helper()
	b, err := os.ReadFile(nginxConf)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	replace := func(old, new string) {
		t.Helper()
		if n := strings.Count(conf, old); n != 1 {
			t.Fatalf("%s holds %q %d times, want once: the test and the example disagree", nginxConf, old, n)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	replace("server 127.0.0.1:8080;", "server "+sluiceAddr+";")
	replace("server 127.0.0.1:3000;", "server "+appAddr+";")
	replace("listen 8000;", "listen "+listenAddr+";")
	return fmt.Sprintf("error_log %s info;\n", filepath.Join(prefix, "error.log")) + conf
}

// nginxPrefix returns a directory for nginx's -p: the example writes its
// pid, logs and temporary files there. As root, the tests run nginx as
// nobody (see nginxCommand), who owns this directory.
func nginxPrefix(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	// t.TempDir's parent is private to root: nobody could not enter it.
	dir, err := os.MkdirTemp("", "sluice-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, gid := nobody(t)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nobody returns the ids of the unprivileged user nginx runs as when the
// tests run as root.
func nobody(t *testing.T) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("running nginx unprivileged as root needs the user nobody: %v", err)
	}
	g, err := user.LookupGroup("nogroup")
	if err != nil {
		t.Fatalf("running nginx unprivileged as root needs the group nogroup: %v", err)
	}
	uid, err = strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatal(err)
	}
	gid, err = strconv.Atoi(g.Gid)
	if err != nil {
		t.Fatal(err)
	}
	return uid, gid
}

// nginxCommand runs nginx with args as the current user, or, as root, as
// nobody, as a user who follows the example's README would: nginx's
// master then runs unprivileged, as its workers do.
func nginxCommand(ctx context.Context, t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		return exec.CommandContext(ctx, bin, args...)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("running nginx unprivileged as root needs setpriv (Debian: util-linux): %v", err)
	}
	return exec.CommandContext(ctx, setpriv, append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", bin}, args...)...)
}

// The committed example is valid nginx as it stands, and runs as an
// unprivileged user: everything it writes is under its prefix.
func TestNginxConfValid(t *testing.T) {
	bin := findNginx(t)
	b, err := os.ReadFile(nginxConf)
	if err != nil {
		t.Fatal(err)
	}
	prefix := nginxPrefix(t)
	// A copy in the prefix, which nginx's user can read wherever the
	// repository is.
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := nginxCommand(t.Context(), t, bin, "-t", "-q", "-p", prefix, "-c", conf, "-g", "error_log stderr;").CombinedOutput()
	if err != nil {
		t.Errorf("nginx -t %s: %v\n%s", nginxConf, err, out)
	}
}

// runNginx starts a real nginx on the example's nginx.conf, edited by
// edits (old, new pairs), in front of a test application and the sluice
// of e, and returns nginx's address and a count of the requests the
// application saw.
func runNginx(t *testing.T, e *env, edits ...string) (string, *atomic.Int64) {
	t.Helper()
	bin := findNginx(t)
	hits := new(atomic.Int64)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello from %s\n", r.URL.Path)
	}))
	t.Cleanup(app.Close)

	prefix := nginxPrefix(t)
	addr := freePort(t)
	conf := filepath.Join(prefix, "nginx.conf")
	rendered := renderNginx(t, prefix, strings.TrimPrefix(e.base, "http://"), strings.TrimPrefix(app.URL, "http://"), addr)
	for i := 0; i+1 < len(edits); i += 2 {
		if strings.Count(rendered, edits[i]) != 1 {
			t.Fatalf("%s does not hold %q once", nginxConf, edits[i])
		}
		rendered = strings.Replace(rendered, edits[i], edits[i+1], 1)
	}
	if err := os.WriteFile(conf, []byte(rendered), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cmd := nginxCommand(ctx, t, bin, "-p", prefix, "-c", conf, "-g", "daemon off;")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait() // SIGTERM: nginx exits; the status says so
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(prefix, "error.log")); err == nil {
				t.Logf("nginx error.log:\n%s", b)
			}
		}
	})
	waitListening(t, addr)
	return addr, hits
}

// nginxGet sends one request to nginx at addr exactly as written: the
// request target and the headers go on the wire unchanged, as an
// attacker's would.
func nginxGet(t *testing.T, addr, target string, hdr ...string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n", target)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// A real nginx in front of an application, with auth_request to sluice as
// examples/nginx shows: the client gets its burst, then 429 with
// Retry-After.
func TestNginx(t *testing.T) {
	e := start(t, Settings{Paths: []string{nginxRules}}) // the test clock stands still
	addr, hits := runNginx(t, e)
	fetch := func(path string) (*http.Response, string) {
		t.Helper()
		return nginxGet(t, addr, path)
	}
	const burst = 20 // examples/nginx/sluice.yaml
	for i := range burst {
		resp, body := fetch(fmt.Sprintf("/items/%d", i))
		if resp.StatusCode != 200 || body != fmt.Sprintf("hello from /items/%d\n", i) {
			t.Fatalf("request %d: %d %q, want the application's 200", i+1, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"per_ip";r=%d;t=`, burst-1-i); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit %q, want %s...", i+1, got, want)
		}
	}
	resp, body := fetch("/items/over")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || body != "Too Many Requests\n" {
		t.Errorf("request %d: %d, Retry-After %q, body %q; want 429, Retry-After 1", burst+1, resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"per_ip";q=20;w=2` {
		t.Errorf("denied: RateLimit-Policy %q", got)
	}
	if n := hits.Load(); n != burst {
		t.Errorf("the application saw %d requests, want %d", n, burst)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "nginx", "rule", "per_ip", "result", "over"); got != 1 {
		t.Errorf("sluice counted %v denials, want 1", got)
	}
	// Time passes: the client is let through again.
	e.clock.Advance(time.Second)
	if resp, _ := fetch("/items/later"); resp.StatusCode != 200 {
		t.Errorf("a second later: %d, want 200", resp.StatusCode)
	}
}

// hostileRules is the example's per-address limit, a limit on /login, and
// a second, lax domain with forward auth of its own.
const hostileRules = `domain: nginx
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}
  - key: path
    value: /login
    rate_limit: {name: login, unit: minute, requests_per_unit: 3}
forward_auth:
  proxy: nginx
  deny_status: 403
  descriptors:
    - entries: [{key: remote_address, from: client_ip}]
    - entries: [{key: path, from: path}]
`

const laxRules = `domain: lax
descriptors:
  - key: path
    rate_limit: {name: lax, unit: minute, requests_per_unit: 1000}
forward_auth:
  proxy: nginx
  descriptors:
    - entries: [{key: path, from: path}]
`

// Through a real nginx set up as examples/nginx shows, a client cannot
// leave its limits by what it sends: not by X-Forwarded-For or X-Real-IP
// of its own, nor by a path spelt another way, nor by X-Original-URI, nor
// by naming another domain in its query.
func TestNginxHostileClient(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "nginx.yaml", hostileRules)
	writeFile(t, dir, "lax.yaml", laxRules)
	e := start(t, Settings{Paths: []string{dir}})
	// Two domains have forward_auth: nginx names its own in the URL it
	// calls, which no client can touch.
	addr, hits := runNginx(t, e, "proxy_pass http://sluice/v1/auth;", "proxy_pass http://sluice/v1/auth?domain=nginx;")

	// A fresh X-Forwarded-For and X-Real-IP on every request: the
	// per-address limit still holds at its burst of 20.
	for i := range 25 {
		resp, _ := nginxGet(t, addr, fmt.Sprintf("/items/%d", i),
			"X-Forwarded-For", fmt.Sprintf("6.6.6.%d", i), "X-Real-IP", fmt.Sprintf("7.7.7.%d", i))
		if want := i < 20; (resp.StatusCode == 200) != want {
			t.Fatalf("request %d with a forged address: %d, want allowed %v", i+1, resp.StatusCode, want)
		}
	}
	e.clock.Advance(3 * time.Second) // the bucket refills; the minute goes on

	// /login, three times a minute however it is written.
	logins := []string{
		"/login", "/login?domain=lax", "/login",
		"//login", "/x/../login", "/./login", "/%6Cogin", "/login/", "/login;jsessionid=1",
		"/%2e%2e/login", "http://app.example/login", "/login?domain=lax",
	}
	for i, target := range logins {
		resp, _ := nginxGet(t, addr, target, "X-Original-URI", "/elsewhere", "X-Forwarded-Uri", "/elsewhere")
		if want := i < 3; (resp.StatusCode == 200) != want {
			t.Errorf("GET %s (login %d): %d, want allowed %v", target, i+1, resp.StatusCode, want)
		}
	}
	if resp, _ := nginxGet(t, addr, "/items/x?domain=lax"); resp.StatusCode != 200 {
		t.Errorf("another path, naming domain lax: %d, want 200", resp.StatusCode)
	}
	if got := counter(t, e.srv, "sluice_decisions_total", "domain", "lax", "rule", "lax", "result", "within"); got != 0 {
		t.Errorf("domain lax decided %v requests; no client can choose it", got)
	}
	if n := hits.Load(); n != 20+3+1 {
		t.Errorf("the application saw %d requests, want %d", n, 20+3+1)
	}
}

// spellingRules limit /login, matched without regard to case, and each
// bearer token; forward auth keys both as nginx passes them.
const spellingRules = `domain: nginx
descriptors:
  - key: path
    value: /login
    rate_limit: {name: login, unit: minute, requests_per_unit: 3}
  - key: token
    secret: true
    rate_limit: {name: per_token, unit: minute, requests_per_unit: 3}
forward_auth:
  proxy: nginx
  deny_status: 403
  descriptors:
    - entries: [{key: path, from: path, path_match: case_insensitive}]
    - entries: [{key: token, from: "header:Authorization"}]
`

// Through a real nginx, the spellings of one path and of one token that
// the application behind takes as the same are one limit: after /login is
// spent, /LOGIN, /login., /login%2e, /login\ and /login%5C are denied, as
// are the token's spellings once it is spent.
func TestNginxSpellings(t *testing.T) {
	e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "nginx.yaml", spellingRules)}})
	addr, _ := runNginx(t, e)
	for i, target := range []string{"/login", "/Login", "/login", "/LOGIN", "/login.", "/login%2e", "/login%2E.", `/login\`, "/login%5C", "/login%5c/", "/LoGiN%2E"} {
		resp, _ := nginxGet(t, addr, target)
		if want := i < 3; (resp.StatusCode == 200) != want {
			t.Errorf("GET %s (login %d): %d, want allowed %v", target, i+1, resp.StatusCode, want)
		}
	}
	for i, auth := range []string{"Bearer T0K", "bearer T0K", "BEARER  T0K", "Bearer T0K ", "bEaReR    T0K"} {
		resp, _ := nginxGet(t, addr, "/items", "Authorization", auth)
		if want := i < 3; (resp.StatusCode == 200) != want {
			t.Errorf("Authorization %q (request %d): %d, want allowed %v", auth, i+1, resp.StatusCode, want)
		}
	}
	// Another token, and the same one in another case, are other
	// credentials.
	if resp, _ := nginxGet(t, addr, "/items", "Authorization", "Bearer t0k"); resp.StatusCode != 200 {
		t.Errorf("Authorization \"Bearer t0k\": %d, want 200 (a token's case counts)", resp.StatusCode)
	}
}

// waitListening waits for addr to accept connections: nginx starts on its
// own time, which no fake clock drives.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s after 60s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
