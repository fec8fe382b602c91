package main

// The console in a real browser: Debian's chromium, driven by chromedp.
// ./scripts/test installs chromium when it is missing; without it these
// tests skip. Every wait has a deadline; none asserts a timing.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
  - key: team
    rate_limits:
      - name: per_team
        algorithm: sliding_log
        unit: hour
        requests_per_unit: 2
      - name: per_team_daily
        unit: day
        requests_per_unit: 1000
  - key: banned
    rate_limit:
      name: blocked
      unit: second
      requests_per_unit: 0
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
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // the whole page, as a PNG
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
	// A team meets two limits: per_team, 2 an hour, denies its last
	// three requests, which per_team_daily would have let through.
	const teamSent, teamLimit = 5, 2
	for i := range teamSent {
		code, _ := s.postJSON(t, "shop", "team", "blue")
		if want := 200; i >= teamLimit && code != 429 || i < teamLimit && code != want {
			t.Errorf("team request %d: %d", i+1, code)
		}
	}
	counts := func(sel string) string {
		return fmt.Sprintf(`(r => r === null ? '' : ['tot-within', 'tot-over', 'win-within', 'win-over'].map(c => r.querySelector('.' + c).textContent).join(' '))`+
			`(document.querySelector('%s'))`, sel)
	}
	p.waitFor("live counters", fmt.Sprintf(`%s === '%d %d %d %d'`, counts(`#live-rules tr[data-domain="shop"][data-rule="per_user"]`), limit, sent-limit, limit, sent-limit))
	// Requests count once each: the team's three denials are not counted
	// as allowed under per_team_daily.
	allowed, denied := limit+teamLimit, sent-limit+teamSent-teamLimit
	p.waitFor("live requests", fmt.Sprintf(`%s === '%d %d %d %d'`, counts(`#live-requests tr[data-domain="shop"]`), allowed, denied, allowed, denied))
	p.waitFor("live limits", fmt.Sprintf(`(r => r !== null && +r.querySelector('.tot-within').textContent + +r.querySelector('.tot-over').textContent === %d)`+
		`(document.querySelector('#live-rules tr[data-rule="per_team_daily"]'))`, teamSent))
	if got := eval[string](p, "live", `document.querySelector('#card-p99').textContent`); got == "–" || got == "" {
		t.Errorf("live: the latency card reads %q after requests, want a time", got)
	}
	if got := eval[string](p, "live", `document.querySelector('#store-badge').textContent`); !strings.Contains(got, "store: memory") {
		t.Errorf("live: the store badge reads %q, want the memory store", got)
	}
	if got := eval[string](p, "live", `document.querySelector('#live-note').textContent`); !strings.Contains(got, "This process only") {
		t.Errorf("live note %q, want it to say the numbers are this process's", got)
	}
	p.shot(shots, "console-live.png")
	p.check("live")

	// Policy: every limit of the config, with its line.
	// A new load of the page, on Policy: the store's state shows on every
	// tab, not only once Live has been opened.
	p.do("policy", chromedp.Navigate(origin+"/ui/?policy#policy"))
	p.visible("policy", `#policy-domains tr[data-rule="per_ip_daily"]`)
	p.waitFor("store badge", `document.querySelector('#store-badge').textContent.startsWith('store: memory')`)
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
	if got := eval[string](p, "policy", `document.querySelector('#policy-domains tr[data-rule="blocked"] td.rate').textContent`); got != "always denied" {
		t.Errorf("policy: a limit of 0 requests has rate %q, want %q", got, "always denied")
	}
	// The page fits a window of 1280 pixels (the browser's), and no rate
	// wraps: a cell of one line has one box per text node.
	if w := eval[float64](p, "policy", `Math.max(document.documentElement.scrollWidth, ...[...document.querySelectorAll('#policy-domains table')].map(t => t.getBoundingClientRect().right))`); w > 1280 {
		t.Errorf("policy: %v px wide, want at most 1280", w)
	}
	if wrapped := eval[[]string](p, "policy", `[...document.querySelectorAll('#policy-domains td.rate')].filter(td => { const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1 }).map(td => td.textContent)`); len(wrapped) > 0 {
		t.Errorf("policy: rates wrap: %q", wrapped)
	}
	noBlankHeaders(t, p, "policy")
	p.shot(shots, "console-policy.png")
	p.check("policy")

	// Look up a key: the state of alice, who is over her limit.
	p.do("lookup", chromedp.Navigate(origin+"/ui/#lookup"))
	p.visible("lookup", "#lookup-form")
	p.waitFor("lookup domains", `document.querySelector('#lookup-domain').value === 'shop'`)
	p.set("#lookup-descriptors", "user=alice\nip=203.0.113.9")
	p.click("#lookup-form button")
	p.waitFor("lookup result", `document.querySelector('#lookup-result tr[data-rule="per_user"] .remaining')?.textContent === '0 of 3'`)
	noBlankHeaders(t, p, "lookup")
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
		if n := eval[int](p, "playground", `document.querySelectorAll('#play-charts svg').length`); n != len(group)+1 {
			t.Errorf("playground: %d charts, want one for the arrivals and one per algorithm", n)
		}
		yAxes(t, p)
	}
	p.check("playground")
	playgroundTeaches(t, p, &runs)
	p.shot(shots, "console-playground.png")
	p.check("playground's charts")

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

// noBlankHeaders fails the test for a column header with no text.
func noBlankHeaders(t *testing.T, p *page, step string) {
	t.Helper()
	if n := eval[int](p, step, `[...document.querySelectorAll('.page.active th')].filter(th => th.textContent.trim() === '').length`); n > 0 {
		t.Errorf("%s: %d column headers without text", step, n)
	}
}

// yAxes fails the test unless every playground chart has a y-axis with
// at least two tick labels.
func yAxes(t *testing.T, p *page) {
	t.Helper()
	bare := eval[[]string](p, "y-axes", `[...document.querySelectorAll('#play-charts svg')].filter(s => [...s.querySelectorAll('.y-axis text.tick')].filter(x => x.textContent.trim() !== '').length < 2).map(s => s.dataset.alg)`)
	if len(bare) > 0 {
		t.Errorf("playground: charts without a y-axis of tick labels: %q", bare)
	}
}

// playRun runs the playground with algs at 5/1s on a scenario, or on a
// Poisson stream of 8 a second for 10s when scenario is "poisson".
func playRun(t *testing.T, p *page, runs *int, scenario string, algs ...string) {
	t.Helper()
	for i := range 3 {
		v := ""
		if i < len(algs) {
			v = algs[i]
		}
		p.set("#play-alg-"+strconv.Itoa(i), v)
	}
	p.set("#play-rate", "5")
	p.set("#play-period", "1s")
	p.set("#play-burst", "0")
	if scenario == "poisson" {
		p.click(`input[name=kind][value=poisson]`)
		p.set("#play-prate", "8")
		p.set("#play-duration", "10s")
		p.set("#play-seed", "1")
	} else {
		p.click(`input[name=kind][value=scenario]`)
		p.set("#play-scenario", scenario)
	}
	p.click("#play-run")
	*runs++
	p.waitFor("playground "+scenario, fmt.Sprintf(`document.body.dataset.playRuns === '%d'`, *runs))
	yAxes(t, p)
}

// playgroundTeaches checks what the charts show: on the burst, the leaky
// queue's waits (sluice demo's release delays), which the token bucket
// has none of; on the steady stream, no denied marks, since nothing is
// denied. It leaves the page on a Poisson stream, for the screenshot.
func playgroundTeaches(t *testing.T, p *page, runs *int) {
	t.Helper()
	playRun(t, p, runs, "burst", "token_bucket", "leaky_queue", "fixed_window")
	waits := eval[[]float64](p, "burst", `[...document.querySelectorAll('svg[data-alg="leaky_queue"] circle.wait')].map(c => +c.dataset.v)`)
	if want := demoDelays(t, "burst"); fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("burst: the leaky queue's chart shows waits %v (ms), sluice demo burst's release delays are %v", waits, want)
	}
	if slices.Max(append(waits, 0)) <= 0 {
		t.Error("burst: the leaky queue's chart shows no wait above zero")
	}
	if n := eval[int](p, "burst", `document.querySelectorAll('svg[data-alg="token_bucket"] circle.wait').length`); n != 0 {
		t.Errorf("burst: the token bucket's chart shows %d waits, want none", n)
	}
	if n := eval[int](p, "burst", `document.querySelectorAll('svg[data-alg="token_bucket"] rect.denied').length`); n == 0 {
		t.Error("burst: the token bucket's chart shows no denied mark, but it denied half the burst")
	}
	if n := eval[int](p, "burst", `document.querySelectorAll('svg[data-alg="token_bucket"] path.state').length`); n != 1 {
		t.Errorf("burst: the token bucket's chart has %d state lines, want 1", n)
	}
	// Durations are rounded: ms with at most one decimal below a second.
	rounded := regexp.MustCompile(`^(–|never|\d+(\.\d)?ms|\d+(\.\d\d?)?s)$`)
	for _, cell := range eval[[]string](p, "burst", `[...document.querySelectorAll('#play-table td.retry')].map(td => td.textContent)`) {
		if !rounded.MatchString(cell) {
			t.Errorf("burst: retry after %q, want a rounded duration", cell)
		}
	}

	playRun(t, p, runs, "steady", "token_bucket", "leaky_queue", "sliding_log")
	if n := eval[int](p, "steady", `document.querySelectorAll('#play-charts rect.denied, #play-charts .strip-label.denied').length`); n != 0 {
		t.Errorf("steady: nothing was denied, yet %d denied marks are drawn", n)
	}

	playRun(t, p, runs, "poisson", "token_bucket", "leaky_queue", "sliding_log")
	if n := eval[int](p, "poisson", `document.querySelectorAll('svg[data-alg="leaky_queue"] circle.wait').length`); n == 0 {
		t.Error("poisson: the leaky queue's chart shows no waits")
	}
}

// demoDelays runs sluice demo SCENARIO and reads the leaky queue's
// release delays, in milliseconds.
func demoDelays(t *testing.T, scenario string) []float64 {
	t.Helper()
	code, out, errOut := runArgs(t, "demo", scenario)
	if code != exitOK {
		t.Fatalf("sluice demo %s: exit %d: %s", scenario, code, errOut)
	}
	_, rest, ok := strings.Cut(strings.Join(strings.Fields(out), " "), "Leaky queue release delays: ")
	line, _, _ := strings.Cut(rest, ". ")
	if !ok || strings.Contains(line, "...") || strings.Contains(line, "each") {
		t.Fatalf("sluice demo %s: no full list of release delays in:\n%s", scenario, out)
	}
	var ms []float64
	for _, f := range strings.Fields(line) {
		d, err := time.ParseDuration(f)
		if err != nil {
			t.Fatalf("sluice demo %s: release delay %q: %v", scenario, f, err)
		}
		ms = append(ms, float64(d)/float64(time.Millisecond))
	}
	return ms
}

// The playground's state series are sluice demo's numbers: on each of the
// demo's scenarios, every algorithm allows and denies as the demo's table
// says, the leaky queue waits as its release delays say, and on the burst
// each algorithm's state after the last request at t=0 is what the
// requests it allowed took: the token bucket's tokens left, the leaky
// bucket's water, GCRA's TAT ahead of now, the windows' counts.
func TestSimulateStateMatchesDemo(t *testing.T) {
	s := startServe(t)
	endpoint := "http://" + s.addr("admin") + "/v1/simulate"
	ids := []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_log", "sliding_counter", "leaky_queue"}
	names := map[string]string{"token_bucket": "token bucket", "leaky_bucket": "leaky bucket", "gcra": "GCRA", "fixed_window": "fixed window",
		"sliding_log": "sliding log", "sliding_counter": "sliding counter", "leaky_queue": "leaky queue"}
	const capacity, intervalMs = 5, 200 // at 5/1s
	for _, scenario := range []string{"burst", "steady", "boundary"} {
		counts := demoCounts(t, scenario)
		for start := 0; start < len(ids); start += 3 {
			group := ids[start:min(start+3, len(ids))]
			body := fmt.Sprintf(`{"algorithms":["%s"],"limit":{"rate":5,"period":"1s"},"pattern":{"kind":"scenario","scenario":%q}}`, strings.Join(group, `","`), scenario)
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Results []struct {
					ID      string `json:"id"`
					Allowed int    `json:"allowed"`
					Denied  int    `json:"denied"`
					State   struct {
						T []float64 `json:"t_ms"`
						V []float64 `json:"v"`
					} `json:"state"`
					Waits *struct {
						V []float64 `json:"v"`
					} `json:"waits"`
				} `json:"results"`
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("POST /v1/simulate %s: %d %v", body, resp.StatusCode, err)
			}
			for _, r := range out.Results {
				if got := fmt.Sprintf("%d %d", r.Allowed, r.Denied); got != counts[names[r.ID]] {
					t.Errorf("%s, %s: allowed and denied %q; sluice demo says %q", scenario, r.ID, got, counts[names[r.ID]])
				}
				if r.ID == "leaky_queue" {
					want := demoDelaysOrZero(t, scenario)
					if r.Waits == nil || fmt.Sprint(r.Waits.V) != fmt.Sprint(want) {
						t.Errorf("%s: the leaky queue's waits %v (ms), sluice demo's release delays %v", scenario, r.Waits, want)
					}
				}
				if scenario != "burst" {
					continue
				}
				// The state after the burst: the last point at t=0.
				after := -1.0
				for i, at := range r.State.T {
					if at == 0 {
						after = r.State.V[i]
					}
				}
				a := float64(r.Allowed)
				want := map[string]float64{"token_bucket": capacity - a, "gcra": a * intervalMs, "leaky_queue": a * intervalMs}[r.ID]
				if r.ID != "token_bucket" && r.ID != "gcra" && r.ID != "leaky_queue" {
					want = a
				}
				if after != want {
					t.Errorf("burst, %s: state %v after the burst, want %v from the %d it allowed", r.ID, after, want, r.Allowed)
				}
			}
		}
	}
}

// demoDelaysOrZero is demoDelays, or for a demo whose leaky queue
// delayed none, its admitted count of zeros.
func demoDelaysOrZero(t *testing.T, scenario string) []float64 {
	t.Helper()
	code, out, _ := runArgs(t, "demo", scenario)
	if code == exitOK && strings.Contains(strings.Join(strings.Fields(out), " "), "release delays: 0s each, no delay.") {
		n, _ := strconv.Atoi(strings.Fields(demoCounts(t, scenario)["leaky queue"])[0])
		return make([]float64, n)
	}
	return demoDelays(t, scenario)
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

// The console's Leases page, on a service leasing a limit from its memory
// authority: the key's lease shows live, this process its holder, and
// the page loads nothing from outside and logs no error.
func TestConsoleLeasesInBrowser(t *testing.T) {
	chromium(t)
	cfg := writeConfig(t, `domain: shop
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 100
      lease: {}
`)
	s := startServe(t, "-config", cfg, "-key-lookup")
	origin := "http://" + s.addr("admin")
	for i := range 3 {
		if code, body := s.postJSON(t, "shop", "user", "alice"); code != 200 {
			t.Fatalf("request %d: %d %s, want 200", i+1, code, body)
		}
	}
	p := newPage(t, origin)
	p.do("leases", chromedp.Navigate(origin+"/ui/#leases"))
	p.visible("leases", `#leases-table tr[data-rule="per_user"]`)
	row := eval[string](p, "leases", `document.querySelector('#leases-table tr[data-rule="per_user"]').textContent`)
	if !strings.Contains(row, "shop|user=alice") || !strings.Contains(row, "(this process)") {
		t.Errorf("leases: the row reads %q, want alice's key held by this process", row)
	}
	if got := eval[string](p, "leases", `document.querySelector('#leases-head').textContent`); !strings.Contains(got, "holds 1 lease") {
		t.Errorf("leases: the heading reads %q, want one lease held", got)
	}
	noBlankHeaders(t, p, "leases")
	p.check("leases")
}
