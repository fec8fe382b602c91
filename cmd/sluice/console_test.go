package main

// The console in a real browser: Debian's chromium, driven by chromedp.
// ./scripts/test installs chromium when it is missing; without it these
// tests skip. Every wait has a deadline; none asserts a timing.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testbrowser"
)

// wait bounds each wait for the page.
const wait = 20 * time.Second

// consoleYAML is the config the browser tests serve.
const consoleYAML = `domain: shop
descriptors:
  - key: user
    rate_limit:
      name: per_user
      algorithm: sliding_log
      unit: hour
      requests_per_unit: 3
  - key: ip
    rate_limits:
      - name: per_ip
        algorithm: token_bucket
        unit: second
        requests_per_unit: 5
        burst: 10
      - name: per_ip_daily
        unit: day
        requests_per_unit: 1000
`

// page is a headless chromium tab on the console, which records the
// console's errors and refuses, and records, every request for anything
// not served by the admin listener.
type page struct {
	t      *testing.T
	ctx    context.Context
	origin string // http://127.0.0.1:PORT

	mu       sync.Mutex
	errs     []string // console errors, exceptions, error log entries
	outside  []string // requests refused: not to the admin listener
	expected []string // substrings of errors a step expects (a 400 it provokes)
}

func chromium(t *testing.T) string { return testbrowser.Chromium(t) }

func newPage(t *testing.T, origin string) *page {
	t.Helper()
	exe := chromium(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	p := &page{t: t, ctx: ctx, origin: origin}
	// The first Run starts the browser, on a context without a deadline.
	err := chromedp.Do(ctx, chromedp.Func(func(_ context.Context, tg *chromedp.Target) error {
		paused := cdp.Events(ctx, tg, fetch.RequestPaused)
		consoleCalls := cdp.Events(ctx, tg, runtime.ConsoleAPICalled)
		exceptions := cdp.Events(ctx, tg, runtime.ExceptionThrown)
		entries := cdp.Events(ctx, tg, cdplog.EntryAdded)
		go func() {
			for ev, err := range paused {
				if err != nil {
					return
				}
				if strings.HasPrefix(ev.Request.URL, origin+"/") {
					cdp.Call(ctx, tg, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
					continue
				}
				p.note(&p.outside, ev.Request.URL)
				cdp.Call(ctx, tg, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
			}
		}()
		go func() {
			for ev, err := range consoleCalls {
				if err != nil {
					return
				}
				if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
					var args []string
					for _, a := range ev.Args {
						args = append(args, string(a.Value)+a.Description)
					}
					p.note(&p.errs, "console."+string(ev.Type)+": "+strings.Join(args, " "))
				}
			}
		}()
		go func() {
			for ev, err := range exceptions {
				if err != nil {
					return
				}
				d := ev.ExceptionDetails
				msg := d.Text
				if d.Exception != nil {
					msg += " " + d.Exception.Description
				}
				p.note(&p.errs, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
			}
		}()
		go func() {
			for ev, err := range entries {
				if err != nil {
					return
				}
				if e := ev.Entry; e.Level == cdplog.EntryLevelError {
					p.note(&p.errs, fmt.Sprintf("%s: %s %s", e.Source, e.Text, e.URL))
				}
			}
		}()
		for _, enable := range []func() error{
			func() error { _, err := cdp.Call(ctx, tg, runtime.Enable, cdp.Empty{}); return err },
			func() error { _, err := cdp.Call(ctx, tg, cdplog.Enable, cdp.Empty{}); return err },
			func() error {
				_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}})
				return err
			},
		} {
			if err := enable(); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return p
}

func (p *page) note(list *[]string, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if list == &p.errs {
		for _, e := range p.expected {
			if strings.Contains(s, e) {
				return
			}
		}
	}
	*list = append(*list, s)
}

// check fails the test for any console error or request outside the
// admin listener so far.
func (p *page) check(step string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		p.t.Errorf("%s: console error: %s", step, e)
	}
	for _, u := range p.outside {
		p.t.Errorf("%s: the page fetched %s, not from the binary", step, u)
	}
	p.errs, p.outside = nil, nil
}

// do runs actions with a deadline.
func (p *page) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", step, err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](p *page, step, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("%s: %s: %v", step, expr, err)
	}
	return v
}

// waitFor waits until a JavaScript expression is truthy.
func (p *page) waitFor(step, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(wait))); err != nil {
		p.t.Fatalf("%s: waiting for %s: %v", step, expr, err)
	}
}

// visible waits until the element sel selects is shown.
func (p *page) visible(step, sel string) {
	p.t.Helper()
	p.waitFor(step, fmt.Sprintf(`(e => e !== null && e.getClientRects().length > 0)(document.querySelector(%s))`, strconv.Quote(sel)))
}

// set sets the value of the element sel selects, as typing would.
func (p *page) set(sel, value string) {
	p.t.Helper()
	eval[bool](p, "set "+sel, fmt.Sprintf(`(e => { e.value = %s; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return e.value === %[1]s })(document.querySelector(%s))`,
		strconv.Quote(value), strconv.Quote(sel)))
}

// click clicks the element sel selects.
func (p *page) click(sel string) {
	p.t.Helper()
	eval[bool](p, "click "+sel, fmt.Sprintf(`(e => { e.click(); return true })(document.querySelector(%s))`, strconv.Quote(sel)))
}

// shot takes a screenshot into the test's temp dir, and into
// $SLUICE_SCREENSHOTS when set, and checks that it is a picture of
// something: a blank page compresses to a few kilobytes.
func (p *page) shot(dir, name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		p.t.Fatalf("screenshot %s: not a PNG: %v", name, err)
	}
	if r := img.Bounds(); r.Dx() < 800 || r.Dy() < 600 {
		p.t.Errorf("screenshot %s: %dx%d, want at least 800x600", name, r.Dx(), r.Dy())
	}
	const least = 20 << 10
	if len(b) < least {
		p.t.Errorf("screenshot %s: %d bytes, less than %d: a blank page?", name, len(b), least)
	}
	for _, d := range []string{dir, os.Getenv("SLUICE_SCREENSHOTS")} {
		if d == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// demoCounts runs sluice demo SCENARIO and reads its table: allowed and
// denied by algorithm name.
func demoCounts(t *testing.T, scenario string) map[string]string {
	t.Helper()
	code, out, errOut := runArgs(t, "demo", scenario)
	if code != exitOK {
		t.Fatalf("sluice demo %s: exit %d: %s", scenario, code, errOut)
	}
	row := regexp.MustCompile(`^(\S+(?: \S+)?)\s+(\d+)\s+(\d+)\s`)
	counts := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			counts[m[1]] = m[2] + " " + m[3]
		}
	}
	if len(counts) != 7 {
		t.Fatalf("sluice demo %s: %d rows in the table, want 7:\n%s", scenario, len(counts), out)
	}
	return counts
}

func TestConsoleInBrowser(t *testing.T) {
	chromium(t)
	cfg := writeConfig(t, consoleYAML)
	s := startServe(t, "-config", cfg, "-key-lookup")
	admin := s.addr("admin")
	origin := "http://" + admin
	p := newPage(t, origin)
	shots := t.TempDir()

	// Live: the page loads with no error, then counts what the service
	// decides.
	p.do("live", chromedp.Navigate(origin+"/ui/#live"))
	p.visible("live", "#live-chart canvas")
	p.check("loading the console")
	const sent, limit = 7, 3 // per_user: 3 an hour, a sliding log
	for i := range sent {
		code, _ := s.postJSON(t, "shop", "user", "alice")
		if want := 200; i >= limit {
			if code != 429 {
				t.Errorf("request %d: %d, want 429", i+1, code)
			}
		} else if code != want {
			t.Errorf("request %d: %d, want %d", i+1, code, want)
		}
	}
	p.waitFor("live counters", fmt.Sprintf(`(r => r !== null && ['tot-within', 'tot-over', 'win-within', 'win-over'].map(c => r.querySelector('.' + c).textContent).join(' ') === '%d %d %d %d')`+
		`(document.querySelector('#live-rules tr[data-domain="shop"][data-rule="per_user"]'))`, limit, sent-limit, limit, sent-limit))
	if got := eval[string](p, "live", `document.querySelector('#live-note').textContent`); !strings.Contains(got, "This process only") {
		t.Errorf("live note %q, want it to say the numbers are this process's", got)
	}
	p.shot(shots, "console-live.png")
	p.check("live")

	// Policy: every limit of the config, with its line.
	p.do("policy", chromedp.Navigate(origin+"/ui/#policy"))
	p.visible("policy", `#policy-domains tr[data-rule="per_ip_daily"]`)
	lines := map[string]int{}
	for i, l := range strings.Split(consoleYAML, "\n") {
		if _, name, ok := strings.Cut(l, "name: "); ok {
			lines[name] = i + 1
		}
	}
	for name, line := range lines {
		got := eval[string](p, "policy", fmt.Sprintf(`document.querySelector('#policy-domains tr[data-rule="%s"] .where').textContent`, name))
		if want := fmt.Sprintf("%s:%d", cfg, line); got != want {
			t.Errorf("policy: %s at %q, want %q", name, got, want)
		}
	}
	if got := eval[string](p, "policy", `document.querySelector('#policy-domains tr[data-rule="per_ip"]').textContent`); !strings.Contains(got, "token_bucket") || !strings.Contains(got, "5 / 1s") || !strings.Contains(got, "10") {
		t.Errorf("policy row per_ip: %q, want token_bucket, 5 / 1s, burst 10", got)
	}
	p.shot(shots, "console-policy.png")
	p.check("policy")

	// Look up a key: the state of alice, who is over her limit.
	p.do("lookup", chromedp.Navigate(origin+"/ui/#lookup"))
	p.visible("lookup", "#lookup-form")
	p.waitFor("lookup domains", `document.querySelector('#lookup-domain').value === 'shop'`)
	p.set("#lookup-descriptors", "user=alice\nip=203.0.113.9")
	p.click("#lookup-form button")
	p.waitFor("lookup result", `document.querySelector('#lookup-result tr[data-rule="per_user"] .remaining')?.textContent === '0 of 3'`)
	p.shot(shots, "console-lookup.png")
	p.check("lookup")

	// Playground: the boundary scenario, every algorithm, three at a
	// time, gives sluice demo boundary's counts.
	want := demoCounts(t, "boundary")
	p.do("playground", chromedp.Navigate(origin+"/ui/#playground"))
	p.visible("playground", "#play-form")
	p.waitFor("first run", `document.body.dataset.play === 'done'`)
	runs := 1
	ids := []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_log", "sliding_counter", "leaky_queue"}
	names := map[string]string{"token_bucket": "token bucket", "leaky_bucket": "leaky bucket", "gcra": "GCRA", "fixed_window": "fixed window",
		"sliding_log": "sliding log", "sliding_counter": "sliding counter", "leaky_queue": "leaky queue"}
	for start := 0; start < len(ids); start += 3 {
		group := ids[start:min(start+3, len(ids))]
		for i := range 3 {
			v := ""
			if i < len(group) {
				v = group[i]
			}
			p.set("#play-alg-"+strconv.Itoa(i), v)
		}
		p.set("#play-rate", "5")
		p.set("#play-period", "1s")
		p.set("#play-burst", "0")
		p.click(`input[name=kind][value=scenario]`)
		p.set("#play-scenario", "boundary")
		p.click("#play-run")
		runs++
		p.waitFor("playground run", fmt.Sprintf(`document.body.dataset.playRuns === '%d'`, runs))
		for _, id := range group {
			got := eval[string](p, "playground", fmt.Sprintf(`(r => r ? r.querySelector('.allowed').textContent + ' ' + r.querySelector('.denied').textContent : 'no row')(document.querySelector('#play-table tr[data-alg="%s"]'))`, id))
			if got != want[names[id]] {
				t.Errorf("playground boundary, %s: allowed and denied %q; sluice demo boundary says %q", id, got, want[names[id]])
			}
		}
		if n := eval[int](p, "playground", `document.querySelectorAll('#play-charts canvas').length`); n < len(group)+1 {
			t.Errorf("playground: %d charts, want one for the arrivals and one per algorithm", n)
		}
		if start == 0 {
			p.shot(shots, "console-playground.png")
		}
	}
	p.check("playground")

	// A bad input shows the server's error; the page still works.
	p.mu.Lock()
	p.expected = []string{"status of 400"} // the browser logs the 400 it provokes
	p.mu.Unlock()
	p.set("#play-period", "soon")
	p.click("#play-run")
	p.waitFor("bad input", `document.body.dataset.play === 'error'`)
	if msg := eval[string](p, "bad input", `document.querySelector('#play-error').textContent`); !strings.Contains(msg, `limit.period: "soon"`) {
		t.Errorf("bad input: the error shown is %q, want the period's", msg)
	}
	if vis := eval[bool](p, "bad input", `!document.querySelector('#play-error').classList.contains('hidden') && document.querySelector('#play-table').classList.contains('hidden')`); !vis {
		t.Error("bad input: the error is hidden, or the last run's table still shows")
	}
	p.shot(shots, "console-playground-error.png")
	p.set("#play-period", "1s")
	p.click("#play-run")
	p.waitFor("recover", `document.body.dataset.play === 'done'`)
	p.check("bad input")
	t.Logf("screenshots in %s", shots)
}

// The console is on the admin listener only, and -ui=false takes it off.
func TestConsoleOff(t *testing.T) {
	s := startServe(t, "-ui=false")
	base := "http://" + s.addr("admin")
	for path, want := range map[string]int{"/ui/": 404, "/v1/stats": 200, "/v1/policy": 200} {
		if code := httpGet(t, base+path); code != want {
			t.Errorf("-ui=false: GET %s: %d, want %d", path, code, want)
		}
	}
	if code := httpGet(t, "http://"+s.addr("http")+"/ui/"); code != 404 {
		t.Errorf("GET /ui/ on the service's own address: %d, want 404", code)
	}
	if !strings.Contains(s.banner["admin"], "/v1/stats") || strings.Contains(s.banner["admin"], "/ui/") {
		t.Errorf("banner: admin %q", s.banner["admin"])
	}
}

func TestConsoleOnByDefault(t *testing.T) {
	s := startServe(t)
	a := s.addr("admin")
	if u, err := url.Parse("http://" + a); err != nil || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		t.Errorf("admin address %q, want loopback", a)
	}
	if code := httpGet(t, "http://"+a+"/ui/"); code != 200 {
		t.Errorf("GET /ui/: %d, want 200", code)
	}
	if !strings.Contains(s.banner["admin"], "/ui/") || strings.Contains(s.banner["admin"], "lookup") {
		t.Errorf("banner: admin %q, want the console and no key lookup", s.banner["admin"])
	}
}

func httpGet(t *testing.T, u string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
