package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httpclient"
)

// reply is one scripted response; header values may depend on the time
// the request arrived (for HTTP-dates).
type reply struct {
	status int
	header func(now time.Time) http.Header
}

func hdr(kv ...string) func(time.Time) http.Header {
	return func(time.Time) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
}

func tooMany(kv ...string) reply { return reply{http.StatusTooManyRequests, hdr(kv...)} }

var ok = reply{status: http.StatusOK}

// script answers requests with its replies in order, repeating the last,
// and records when each request arrived and what body it carried.
type script struct {
	mu      sync.Mutex
	replies []reply
	hits    []hit
}

type hit struct {
	at   time.Time
	body string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	now := time.Now()
	s.mu.Lock()
	n := len(s.hits)
	s.hits = append(s.hits, hit{now, string(body)})
	rep := s.replies[min(n, len(s.replies)-1)]
	s.mu.Unlock()
	if rep.header != nil {
		for k, vs := range rep.header(now) {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, "attempt "+string(rune('1'+n)))
}

func (s *script) arrivals(t0 time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, h := range s.hits {
		out = append(out, h.at.Sub(t0))
	}
	slices.Sort(out)
	return out
}

// setup starts a server answering with replies and returns a client
// through a Transport with opts, in the current synctest bubble.
func setup(t *testing.T, replies []reply, opts ...httpclient.Option) (*script, *http.Client, string) {
	t.Helper()
	s := &script{replies: replies}
	srv, base := startServer(t, s)
	tr, err := httpclient.NewTransport(base, opts...)
	if err != nil {
		t.Fatalf("NewTransport: %v", err)
	}
	return s, &http.Client{Transport: tr}, srv.URL
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

func TestServerAskedWait(t *testing.T) {
	date := func(d time.Duration) func(time.Time) http.Header {
		return func(now time.Time) http.Header {
			return http.Header{"Retry-After": {now.Add(d).UTC().Format(http.TimeFormat)}}
		}
	}
	for _, tc := range []struct {
		name       string
		first      reply
		opts       []httpclient.Option
		wantHits   int
		wantStatus int
		// the wait between the attempts: exactly wantMin when wantMax is 0
		wantMin, wantMax time.Duration
	}{
		{name: "429 delta-seconds", first: tooMany("Retry-After", "2"), wantHits: 2, wantStatus: 200, wantMin: 2 * time.Second},
		{name: "429 zero", first: tooMany("Retry-After", "0"), wantHits: 2, wantStatus: 200},
		{name: "429 HTTP-date", first: reply{429, date(3 * time.Second)}, wantHits: 2, wantStatus: 200, wantMin: 3 * time.Second},
		{name: "429 past HTTP-date", first: reply{429, date(-time.Hour)}, wantHits: 2, wantStatus: 200},
		{name: "429 obsolete date format", first: tooMany("Retry-After", "Saturday, 01-Jan-00 00:00:04 GMT"), wantHits: 2, wantStatus: 200, wantMin: 4 * time.Second},
		{name: "503 with Retry-After", first: reply{503, hdr("Retry-After", "1")}, wantHits: 2, wantStatus: 200, wantMin: time.Second},
		{name: "503 without Retry-After", first: reply{status: 503}, wantHits: 1, wantStatus: 503},
		{name: "500 with Retry-After", first: reply{500, hdr("Retry-After", "1")}, wantHits: 1, wantStatus: 500},
		{name: "429 beyond max wait", first: tooMany("Retry-After", "61"), wantHits: 1, wantStatus: 429},
		{name: "429 at max wait", first: tooMany("Retry-After", "60"), wantHits: 2, wantStatus: 200, wantMin: time.Minute},
		{name: "own max wait", first: tooMany("Retry-After", "6"), opts: []httpclient.Option{httpclient.WithMaxWait(5 * time.Second)}, wantHits: 1, wantStatus: 429},
		{name: "no retries", first: tooMany("Retry-After", "1"), opts: []httpclient.Option{httpclient.WithMaxRetries(0)}, wantHits: 1, wantStatus: 429},

		// Hostile values: never a panic, never a wait longer than allowed.
		{name: "huge delta-seconds", first: tooMany("Retry-After", "99999999999999999999999"), wantHits: 1, wantStatus: 429},
		{name: "largest int64", first: tooMany("Retry-After", "9223372036854775807"), wantHits: 1, wantStatus: 429},
		{name: "far HTTP-date", first: tooMany("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), wantHits: 1, wantStatus: 429},
		{name: "negative", first: tooMany("Retry-After", "-5"), wantHits: 2, wantStatus: 200, wantMin: 50 * time.Millisecond, wantMax: 100 * time.Millisecond},
		{name: "fraction", first: tooMany("Retry-After", "1.5"), wantHits: 2, wantStatus: 200, wantMin: 50 * time.Millisecond, wantMax: 100 * time.Millisecond},
		{name: "garbage", first: tooMany("Retry-After", "soon, maybe"), wantHits: 2, wantStatus: 200, wantMin: 50 * time.Millisecond, wantMax: 100 * time.Millisecond},
		{name: "long garbage", first: tooMany("Retry-After", strings.Repeat("9x", 50000)), wantHits: 2, wantStatus: 200, wantMin: 50 * time.Millisecond, wantMax: 100 * time.Millisecond},
		{name: "two values, first wins", first: tooMany("Retry-After", "1", "Retry-After", "50"), wantHits: 2, wantStatus: 200, wantMin: time.Second},
		{name: "none: backoff", first: tooMany(), wantHits: 2, wantStatus: 200, wantMin: 50 * time.Millisecond, wantMax: 100 * time.Millisecond},
		{name: "503 garbage", first: reply{503, hdr("Retry-After", "later")}, wantHits: 1, wantStatus: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, c, url := setup(t, []reply{tc.first, ok}, tc.opts...)
				t0 := time.Now()
				resp, err := get(t, c, t.Context(), url)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
				}
				at := s.arrivals(t0)
				if len(at) != tc.wantHits {
					t.Fatalf("server saw %d requests, want %d", len(at), tc.wantHits)
				}
				if len(at) < 2 {
					if el := time.Since(t0); el != 0 {
						t.Fatalf("returned after %v, want at once", el)
					}
					return
				}
				gap := at[1] - at[0]
				if tc.wantMax == 0 && gap != tc.wantMin || tc.wantMax != 0 && (gap < tc.wantMin || gap > tc.wantMax) {
					t.Fatalf("retried after %v, want %v..%v", gap, tc.wantMin, max(tc.wantMin, tc.wantMax))
				}
			})
		})
	}
}

func TestMaxRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := setup(t, []reply{tooMany("Retry-After", "1")}, httpclient.WithMaxRetries(2))
		t0 := time.Now()
		resp, err := get(t, c, t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 429 || string(body) != "attempt 3" {
			t.Fatalf("got %d %q, want the third attempt's 429", resp.StatusCode, body)
		}
		if got, want := s.arrivals(t0), []time.Duration{0, time.Second, 2 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("arrivals %v, want %v", got, want)
		}
	})
}

func TestBackoffGrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := setup(t, []reply{tooMany()}, httpclient.WithBackoff(time.Second, 3*time.Second), httpclient.WithMaxRetries(4))
		t0 := time.Now()
		if _, err := get(t, c, t.Context(), url); err != nil {
			t.Fatal(err)
		}
		at := s.arrivals(t0)
		if len(at) != 5 {
			t.Fatalf("%d attempts, want 5", len(at))
		}
		for k, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
			if gap := at[k+1] - at[k]; gap < d/2 || gap > d {
				t.Errorf("backoff %d: %v, want %v..%v", k, gap, d/2, d)
			}
		}
	})
}

func TestCancelStopsWaitAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies []reply
		opts    []httpclient.Option
		first   bool // make one request before the one canceled
	}{
		{name: "Retry-After", replies: []reply{tooMany("Retry-After", "30")}},
		{name: "backoff", replies: []reply{tooMany()}, opts: []httpclient.Option{httpclient.WithBackoff(10*time.Second, 10*time.Second)}},
		{name: "algorithm", replies: []reply{ok}, opts: []httpclient.Option{httpclient.WithAlgorithm(mustGCRA(t, sluice.PerMinute(1)))}, first: true},
		{name: "server pause", replies: []reply{{200, hdr("RateLimit", `"q";r=0;t=30`)}}, first: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, c, url := setup(t, tc.replies, tc.opts...)
				if tc.first {
					if _, err := get(t, c, t.Context(), url); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(time.Second, cancel)
				t0 := time.Now()
				_, err := get(t, c, ctx, url)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
				if el := time.Since(t0); el != time.Second {
					t.Fatalf("returned %v after the start, want 1s: at the cancel", el)
				}
				if n := len(s.arrivals(t0)); n > 2 {
					t.Fatalf("server saw %d requests", n)
				}
			})
		})
	}
}

func TestDeadlineTooClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := setup(t, []reply{tooMany("Retry-After", "30"), ok})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		t0 := time.Now()
		resp, err := get(t, c, ctx, url)
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("got %v, %v; want the 429 at once", resp, err)
		}
		if el := time.Since(t0); el != 0 || len(s.arrivals(t0)) != 1 {
			t.Fatalf("waited %v, %d requests", el, len(s.arrivals(t0)))
		}
		// The pause asked for holds later requests back, but not past
		// their deadline either.
		_, err = get(t, c, ctx, url)
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) || time.Since(t0) != 0 {
			t.Fatalf("second request: %v after %v, want ErrWouldExceedDeadline at once", err, time.Since(t0))
		}
	})
}

type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func TestBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := setup(t, []reply{tooMany("Retry-After", "1"), ok})

		// No GetBody: the body cannot be sent again, so no retry.
		body := &trackedBody{Reader: strings.NewReader("once")}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || len(s.hits) != 1 || !body.closed {
			t.Fatalf("non-replayable: status %d, %d requests, body closed %v; want 429, 1, true", resp.StatusCode, len(s.hits), body.closed)
		}

		// With GetBody (strings.Reader), the same bytes go again.
		s.hits, s.replies = nil, []reply{tooMany("Retry-After", "1"), ok}
		req, err = http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || len(s.hits) != 2 || s.hits[0].body != "payload" || s.hits[1].body != "payload" {
			t.Fatalf("replayable: status %d, hits %+v", resp.StatusCode, s.hits)
		}

		// GetBody failing ends the request with its error.
		s.hits, s.replies = nil, []reply{tooMany("Retry-After", "1"), ok}
		req, err = http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		broken := errors.New("cannot rewind")
		req.GetBody = func() (io.ReadCloser, error) { return nil, broken }
		if _, err = c.Do(req); !errors.Is(err, broken) {
			t.Fatalf("err = %v, want %v", err, broken)
		}
	})
}

func mustGCRA(t *testing.T, l sluice.Limit) *sluice.GCRA {
	t.Helper()
	g, err := sluice.NewGCRA(l)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPacing(t *testing.T) {
	const half = 500 * time.Millisecond
	for _, tc := range []struct {
		name       string
		pacer      func(t *testing.T) httpclient.Option
		concurrent bool
		want       []time.Duration
	}{
		{
			name: "GCRA, sequential",
			pacer: func(t *testing.T) httpclient.Option {
				return httpclient.WithAlgorithm(mustGCRA(t, sluice.Limit{Rate: 2, Period: time.Second, Burst: 1}))
			},
			want: []time.Duration{0, half, 2 * half, 3 * half, 4 * half},
		},
		{
			name: "token bucket burst, concurrent",
			pacer: func(t *testing.T) httpclient.Option {
				tb, err := sluice.NewTokenBucket(sluice.Limit{Rate: 2, Period: time.Second, Burst: 2})
				if err != nil {
					t.Fatal(err)
				}
				return httpclient.WithAlgorithm(tb)
			},
			concurrent: true,
			want:       []time.Duration{0, 0, half, 2 * half, 3 * half},
		},
		{
			name: "leaky queue, concurrent",
			pacer: func(t *testing.T) httpclient.Option {
				q, err := sluice.NewLeakyQueue(sluice.Limit{Rate: 4, Period: time.Second, Burst: 10})
				if err != nil {
					t.Fatal(err)
				}
				return httpclient.WithPacer(q)
			},
			concurrent: true,
			want:       []time.Duration{0, half / 2, half, 3 * half / 2, 2 * half},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, c, url := setup(t, []reply{ok}, tc.pacer(t))
				t0 := time.Now()
				var wg sync.WaitGroup
				for range len(tc.want) {
					do := func() {
						resp, err := get(t, c, t.Context(), url)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
					}
					if tc.concurrent {
						wg.Go(do)
					} else {
						do()
					}
				}
				wg.Wait()
				if got := s.arrivals(t0); !slices.Equal(got, tc.want) {
					t.Fatalf("arrivals %v, want %v", got, tc.want)
				}
			})
		})
	}
}

func TestPacingErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		zero, err := sluice.NewTokenBucket(sluice.PerSecond(0))
		if err != nil {
			t.Fatal(err)
		}
		s, c, url := setup(t, []reply{ok}, httpclient.WithAlgorithm(zero))
		body := &trackedBody{Reader: strings.NewReader("x")}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(req); !errors.Is(err, httpclient.ErrNeverAllowed) {
			t.Fatalf("rate 0: err = %v, want ErrNeverAllowed", err)
		}
		if !body.closed || len(s.hits) != 0 {
			t.Fatalf("body closed %v, %d requests sent; want true, 0", body.closed, len(s.hits))
		}

		_, c, url = setup(t, []reply{ok}, httpclient.WithAlgorithm(mustGCRA(t, sluice.PerMinute(1))))
		if _, err := get(t, c, t.Context(), url); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		t0 := time.Now()
		if _, err := get(t, c, ctx, url); !errors.Is(err, sluice.ErrWouldExceedDeadline) || time.Since(t0) != 0 {
			t.Fatalf("err = %v after %v, want ErrWouldExceedDeadline at once", err, time.Since(t0))
		}

		q, err := sluice.NewLeakyQueue(sluice.Limit{Rate: 1, Period: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, c, url = setup(t, []reply{ok}, httpclient.WithPacer(q))
		if _, err := get(t, c, t.Context(), url); err != nil {
			t.Fatal(err)
		}
		if _, err := get(t, c, t.Context(), url); !errors.Is(err, sluice.ErrQueueFull) {
			t.Fatalf("full queue: err = %v, want ErrQueueFull", err)
		}
	})
}

func TestRateLimitFieldPauses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field []string
		want  time.Duration // wait before the next request
	}{
		{"spent", []string{`"default";r=0;t=5`}, 5 * time.Second},
		{"one of two spent", []string{`"burst";r=3;t=1, "day";r=0;t=7`}, 7 * time.Second},
		{"two fields", []string{`"a";r=0;t=2`, `"b";r=0;t=4`}, 4 * time.Second},
		{"quoted comma and semicolon", []string{`"a,b;r=9";r=0;t=3`}, 3 * time.Second},
		{"token name", []string{`default;t=2;r=0`}, 2 * time.Second},
		{"units left", []string{`"default";r=1;t=5`}, 0},
		{"no t", []string{`"default";r=0`}, 0},
		{"beyond max wait", []string{`"default";r=0;t=61`}, 0},
		{"huge t", []string{`"default";r=0;t=99999999999999999999`}, 0},
		{"negative t", []string{`"default";r=0;t=-5`}, 0},
		{"garbage", []string{`";;;,,,"\`, `r=0;t=5`}, 0},
		{"unterminated", []string{`"default;r=0;t=5`}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := http.Header{"Ratelimit": tc.field}
				first := reply{200, func(time.Time) http.Header { return h }}
				s, c, url := setup(t, []reply{first, ok})
				t0 := time.Now()
				for range 2 {
					if _, err := get(t, c, t.Context(), url); err != nil {
						t.Fatal(err)
					}
				}
				if got := s.arrivals(t0); len(got) != 2 || got[1] != tc.want {
					t.Fatalf("arrivals %v, want the second at %v", got, tc.want)
				}
			})
		})
	}
}

func TestRetryAfterPausesOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A non-replayable request is not retried, but its Retry-After
		// still holds the next request back.
		s, c, url := setup(t, []reply{tooMany("Retry-After", "3"), ok})
		t0 := time.Now()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, io.NopCloser(strings.NewReader("x")))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("%v, %v", resp, err)
		}
		resp.Body.Close()
		if _, err := get(t, c, t.Context(), url); err != nil {
			t.Fatal(err)
		}
		if got, want := s.arrivals(t0), []time.Duration{0, 3 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("arrivals %v, want %v", got, want)
		}
	})
}

func TestNewTransportErrors(t *testing.T) {
	g, err := sluice.NewGCRA(sluice.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	q, err := sluice.NewLeakyQueue(sluice.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []httpclient.Option
		want string
	}{
		{"negative retries", []httpclient.Option{httpclient.WithMaxRetries(-1)}, "max retries"},
		{"negative max wait", []httpclient.Option{httpclient.WithMaxWait(-time.Second)}, "max wait"},
		{"zero backoff", []httpclient.Option{httpclient.WithBackoff(0, time.Second)}, "backoff"},
		{"backoff above max", []httpclient.Option{httpclient.WithBackoff(2*time.Second, time.Second)}, "backoff"},
		{"nil clock", []httpclient.Option{httpclient.WithClock(nil)}, "clock"},
		{"both pacers", []httpclient.Option{httpclient.WithAlgorithm(g), httpclient.WithPacer(q)}, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := httpclient.NewTransport(nil, tc.opts...)
			if err == nil || tr != nil {
				t.Fatalf("NewTransport = %v, %v; want an error", tr, err)
			}
			if !strings.HasPrefix(err.Error(), "httpclient: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want httpclient: ... %s", err, tc.want)
			}
		})
	}
	if _, err := httpclient.NewTransport(nil, nil, httpclient.WithMaxRetries(0), httpclient.WithMaxWait(0)); err != nil {
		t.Fatalf("zero retries and wait: %v", err)
	}
}
