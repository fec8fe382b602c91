package server

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testbrowser"
)

// postAs posts body to /json with the given headers ("Host" sets the
// request's Host) and returns the status and the answer.
func postAs(t *testing.T, e *env, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+"/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	code, _, out := do(t, req)
	return code, out
}

const aliceJSON = `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`

// A web page can make its visitor's browser POST to /json without a
// preflight: fetch in no-cors mode with a text/plain body, a form (whose
// text/plain encoding can spell JSON), a multipart upload; a page of a
// site pointed at the service's address (DNS rebinding) is same-origin
// but still sends Origin. Each is refused with 403 and charges nothing;
// curl and Envoy, which send no Origin, are answered.
func TestJSONRefusesBrowserPages(t *testing.T) {
	e := start(t, Settings{})
	const evil = "https://evil.example"
	form := `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice"}]}],"pad":"` + "=" + `"}` + "\r\n"
	multipart := "------WebKitFormBoundaryx7\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\n" + aliceJSON + "\r\n------WebKitFormBoundaryx7--\r\n"
	for _, c := range []struct {
		name, body string
		hdr        []string
	}{
		{"fetch no-cors text/plain", aliceJSON, []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", evil,
			"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "empty"}},
		{"form text/plain", form, []string{"Content-Type", "text/plain", "Origin", evil,
			"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document", "Sec-Fetch-User", "?1"}},
		{"form urlencoded", "q=" + aliceJSON, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", evil,
			"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}},
		{"multipart", multipart, []string{"Content-Type", "multipart/form-data; boundary=----WebKitFormBoundaryx7", "Origin", evil,
			"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "empty"}},
		{"sandboxed frame", aliceJSON, []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", "null", "Sec-Fetch-Site", "cross-site"}},
		{"DNS rebinding, same origin", aliceJSON, []string{"Content-Type", "application/json", "Origin", "http://rebound.example:8080",
			"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Host", "rebound.example:8080"}},
		{"same site, no Origin", aliceJSON, []string{"Sec-Fetch-Site", "same-site"}},
		{"an older browser: Origin only", aliceJSON, []string{"Content-Type", "text/plain", "Origin", evil}},
	} {
		if code, out := postAs(t, e, c.body, c.hdr...); code != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", c.name, code, out)
		}
	}
	// curl -d (form-urlencoded, no Origin) and a program's JSON: answered,
	// and the first charge is theirs.
	code, out := postAs(t, e, aliceJSON, "Content-Type", "application/x-www-form-urlencoded", "User-Agent", "curl/8.5.0")
	if code != http.StatusOK || !strings.Contains(out, `"limitRemaining":2`) {
		t.Errorf("curl -d: %d %s, want 200 with 2 of 3 left (nothing charged before)", code, out)
	}
	// A browser that navigates by itself (Sec-Fetch-Site: none) or a page
	// of the service's own origin without Origin (none sends POST so):
	// not a cross-site request.
	if code, out := postAs(t, e, aliceJSON, "Sec-Fetch-Site", "none"); code != http.StatusOK {
		t.Errorf("Sec-Fetch-Site: none: %d %s, want 200", code, out)
	}
}

// With HTTPAllowedHosts, POST /json answers only those names, IP
// addresses and localhost: a name pointed at the service by DNS
// rebinding gets 421 and charges nothing.
func TestJSONAllowedHosts(t *testing.T) {
	e := start(t, Settings{HTTPAllowedHosts: []string{"ratelimit.internal"}})
	for _, host := range []string{"rebound.example", "rebound.example:8080", "ratelimit.internal.evil.example", "internal"} {
		if code, out := postAs(t, e, aliceJSON, "Host", host); code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: %d %q, want 421", host, code, out)
		}
	}
	for i, host := range []string{"ratelimit.internal", "RateLimit.Internal.:8080", "127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		code, out := postAs(t, e, aliceJSON, "Host", host)
		switch {
		case i == 0 && (code != http.StatusOK || !strings.Contains(out, `"limitRemaining":2`)):
			t.Errorf("Host %q: %d %s, want 200 with 2 of 3 left (nothing charged before)", host, code, out)
		case i > 0 && i < 3 && code != http.StatusOK, i >= 3 && code != http.StatusTooManyRequests:
			t.Errorf("Host %q, request %d: %d %s; want answered, 3 a minute", host, i+1, code, out)
		}
	}
	// Forward auth is not held to it: nginx passes the original Host.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.base+"/v1/auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "shop.example"
	req.Header.Set("X-User", "bob")
	req.Header.Set("X-Real-IP", testClient)
	if code, _, body := do(t, req); code != http.StatusOK {
		t.Errorf("forward auth with the original Host: %d %q, want 200", code, body)
	}
}

// attackPage is a page of another site that makes its visitor's browser
// POST to a service's /json in the three ways that need no CORS
// preflight: fetch in no-cors mode with a text/plain body and with a
// multipart one, then a form whose text/plain encoding spells JSON (for
// user "alice=": the encoding puts its '=' there).
const attackPage = `<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{{json}}"><input name='{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice' value='"}]}]}'></form>
<script>
const body = '{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}';
const fd = new FormData();
fd.append("q", body);
fetch("{{json}}", {method: "POST", mode: "no-cors", body: body})
  .finally(() => fetch("{{json}}", {method: "POST", mode: "no-cors", body: fd}))
  .finally(() => document.getElementById("f").submit());
</script></body></html>`

// A real browser (headless Chromium) on a page of another site: its three
// POSTs reach /json and are refused, and charge nothing.
func TestJSONFromChromium(t *testing.T) {
	bin := testbrowser.Chromium(t)
	s, _ := newServer(t, Settings{})
	var mu sync.Mutex
	var posts []int // the status of each POST /json a page sent
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if r.Method == http.MethodPost && r.Header.Get("Origin") != "" {
			mu.Lock()
			posts = append(posts, rec.Code)
			mu.Unlock()
		}
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	defer svc.Close()
	// The page is served as localhost, the service reached as 127.0.0.1:
	// two sites.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, strings.ReplaceAll(attackPage, "{{json}}", svc.URL+"/json"))
	}))
	defer page.Close()
	_, port, _ := net.SplitHostPort(page.Listener.Addr().String())

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", "http://localhost:"+port+"/")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(posts)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the page's 3 POSTs reached the service", n)
		}
		time.Sleep(10 * time.Millisecond) // the browser sends on its own time
	}
	mu.Lock()
	for i, code := range posts {
		if code != http.StatusForbidden {
			t.Errorf("the page's POST %d: %d, want 403", i+1, code)
		}
	}
	mu.Unlock()
	// per_user allows 3 a minute, none of them spent by the page.
	for i, want := range []int{200, 200, 200, 429} {
		if code := jsonPost(t, s, "test", "user", "alice"); code != want {
			t.Errorf("a program's POST %d after the page's: %d, want %d", i+1, code, want)
		}
	}
}
