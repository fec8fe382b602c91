package httpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Pacer decides when a request may go out: Wait blocks until n units may
// pass, or fails. *sluice.LeakyQueue is a Pacer: requests leave evenly
// spaced, in order.
type Pacer interface {
	Wait(ctx context.Context, n int64) error
}

var _ Pacer = (*sluice.LeakyQueue)(nil)

// ErrNeverAllowed is returned when the pacing algorithm can never allow a
// request: its cost exceeds the limit's capacity, or the rate is 0.
var ErrNeverAllowed = errors.New("httpclient: the pacing limit can never allow a request")

// Defaults of the options.
const (
	DefaultMaxRetries  = 3
	DefaultMaxWait     = time.Minute
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffMax  = 10 * time.Second
)

// Transport is an http.RoundTripper that paces outgoing requests and
// honours the server's rate limits:
//
//   - Before each attempt it waits for a pause the server asked for (see
//     below), then for its Pacer, if it has one: a sluice algorithm
//     (WithAlgorithm) or a shaper such as sluice.LeakyQueue (WithPacer).
//   - A 429 Too Many Requests, or a 503 Service Unavailable with
//     Retry-After, is retried after the server's Retry-After
//     (delta-seconds or an HTTP-date), or after a jittered exponential
//     backoff when a 429 has none, up to WithMaxRetries times.
//   - A server's wait longer than WithMaxWait, or one that would pass the
//     request's deadline, is not waited: the response is returned as it
//     is, for the caller to decide.
//   - Only requests whose body can be sent again are retried: no body, or
//     Request.GetBody set (http.NewRequest sets it for bytes.Reader,
//     bytes.Buffer and strings.Reader bodies). Otherwise the response is
//     returned as it is.
//   - A 429's or 503's Retry-After, and a RateLimit field of any response
//     that says the quota is spent (`"name";r=0;t=N`), pause every later
//     request through the Transport until then, when that is within
//     WithMaxWait: the server's limit is usually one for the whole
//     client. Use one Transport per API.
//
// Every wait ends at once when the request's context does, and RoundTrip
// then returns the context's error. The last response of a request that
// is not retried again is returned unread; the bodies of the others are
// drained and closed.
//
// A Transport is safe for concurrent use.
type Transport struct {
	base        http.RoundTripper
	pacer       Pacer
	alg         sluice.Algorithm
	clock       sluice.Clock
	maxRetries  int
	maxWait     time.Duration
	backoffBase time.Duration
	backoffMax  time.Duration
	jitter      func(n int64) int64 // uniform in [0, n)

	// pauseUntil is the Unix time in nanoseconds before which no request
	// goes out, set from the server's Retry-After and RateLimit fields.
	pauseUntil atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// Option configures a Transport.
type Option func(*Transport)

// WithAlgorithm paces requests with a, one unit per attempt: a request
// that a denies waits its RetryAfter and asks again, until allowed.
// Requests waiting together are not served in order; for that, use
// WithPacer with a sluice.LeakyQueue. The default is no pacing.
func WithAlgorithm(a sluice.Algorithm) Option { return func(t *Transport) { t.alg = a } }

// WithPacer paces requests with p, one unit per attempt. An error from p
// fails the request. The default is no pacing.
func WithPacer(p Pacer) Option { return func(t *Transport) { t.pacer = p } }

// WithMaxRetries sets how many times a request is sent again after a 429
// or 503; 0 turns retries off. The default is DefaultMaxRetries, 3.
func WithMaxRetries(n int) Option { return func(t *Transport) { t.maxRetries = n } }

// WithMaxWait sets the longest the Transport waits on the server's word,
// Retry-After or RateLimit; a longer wait is not waited and the response
// is returned. The default is DefaultMaxWait, one minute.
func WithMaxWait(d time.Duration) Option { return func(t *Transport) { t.maxWait = d } }

// WithBackoff sets the backoff after a 429 without Retry-After: before
// retry k (from 0) the Transport waits d/2 plus a random part of up to d/2,
// where d = min(base·2^k, maxWait). The defaults are DefaultBackoffBase,
// 100ms, and DefaultBackoffMax, 10s.
func WithBackoff(base, maxWait time.Duration) Option {
	return func(t *Transport) { t.backoffBase, t.backoffMax = base, maxWait }
}

// WithClock sets the clock the Transport reads for pacing and for
// Retry-After dates. Waits use timers; the default is sluice.SystemClock.
func WithClock(c sluice.Clock) Option { return func(t *Transport) { t.clock = c } }

// NewTransport returns a Transport that sends requests with base, or
// http.DefaultTransport when base is nil. It fails on a negative retry
// count or wait, a backoff base that is not positive or above its maximum,
// a nil clock, or both an algorithm and a pacer.
func NewTransport(base http.RoundTripper, opts ...Option) (*Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{
		base:        base,
		clock:       sluice.SystemClock,
		maxRetries:  DefaultMaxRetries,
		maxWait:     DefaultMaxWait,
		backoffBase: DefaultBackoffBase,
		backoffMax:  DefaultBackoffMax,
		jitter:      rand.Int64N,
	}
	for _, o := range opts {
		if o != nil {
			o(t)
		}
	}
	switch {
	case t.maxRetries < 0:
		return nil, fmt.Errorf("httpclient: max retries %d must not be negative", t.maxRetries)
	case t.maxWait < 0:
		return nil, fmt.Errorf("httpclient: max wait %v must not be negative", t.maxWait)
	case t.backoffBase <= 0 || t.backoffMax < t.backoffBase:
		return nil, fmt.Errorf("httpclient: backoff base %v must be positive and at most the maximum %v", t.backoffBase, t.backoffMax)
	case t.clock == nil:
		return nil, errors.New("httpclient: nil clock")
	case t.alg != nil && t.pacer != nil:
		return nil, errors.New("httpclient: both an algorithm and a pacer: choose one")
	}
	if t.alg != nil {
		t.pacer = algorithmPacer{t.alg, t.clock}
	}
	return t, nil
}

// RoundTrip sends req, paced, and retries it as the Transport's
// documentation says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 0; ; attempt++ {
		r := req
		if attempt > 0 {
			var err error
			if r, err = rewind(req); err != nil {
				return nil, err
			}
		}
		if err := t.pace(ctx); err != nil {
			if r.Body != nil {
				r.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, err
		}
		resp, err := t.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		wait, retry := t.afterResponse(resp, attempt)
		if !retry || !replayable || attempt >= t.maxRetries || !t.canWait(ctx, wait) {
			return resp, nil
		}
		discard(resp.Body)
		if wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				return nil, err
			}
		}
	}
}

// rewind is a copy of req to send again, with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("httpclient: body for a retry: %w", err)
	}
	r.Body = body
	return r, nil
}

// afterResponse reads the server's rate-limit word in resp: it records a
// pause for later requests, and says whether and after how long to retry.
func (t *Transport) afterResponse(resp *http.Response, attempt int) (wait time.Duration, retry bool) {
	now := t.clock.Now()
	if d, ok := quotaSpent(resp.Header.Values("Ratelimit")); ok && d <= t.maxWait {
		t.pause(now, d)
	}
	ra, hasRA := parseRetryAfter(resp.Header.Get("Retry-After"), now)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && !hasRA:
		return t.backoff(attempt), true
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusServiceUnavailable && hasRA:
		if ra > t.maxWait {
			return ra, false
		}
		t.pause(now, ra)
		return ra, true
	}
	return 0, false
}

// canWait reports whether waiting d ends before ctx's deadline.
func (t *Transport) canWait(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || !deadline.Before(t.clock.Now().Add(d))
}

// pause keeps later requests back until now+d.
func (t *Transport) pause(now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	until := now.Add(d).UnixNano()
	for {
		cur := t.pauseUntil.Load()
		if cur >= until || t.pauseUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// backoff is the wait before retry attempt+1 of a 429 without
// Retry-After: d/2 plus up to d/2 at random, d = min(base·2^attempt, max).
func (t *Transport) backoff(attempt int) time.Duration {
	d := t.backoffMax
	if attempt < 62 && t.backoffBase <= t.backoffMax>>attempt {
		d = t.backoffBase << attempt
	}
	return d/2 + time.Duration(t.jitter(int64(d-d/2)+1))
}

// pace waits for the server's pause, then for the pacer.
func (t *Transport) pace(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if until := t.pauseUntil.Load(); until != 0 {
		if d := time.Unix(0, until).Sub(t.clock.Now()); d > 0 {
			if !t.canWait(ctx, d) {
				return fmt.Errorf("httpclient: server asked to wait %v: %w", d, sluice.ErrWouldExceedDeadline)
			}
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
	}
	if t.pacer == nil {
		return nil
	}
	return t.pacer.Wait(ctx, 1)
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has such a method, as http.Client.CloseIdleConnections expects.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// algorithmPacer waits until a sluice algorithm allows n units.
type algorithmPacer struct {
	a     sluice.Algorithm
	clock sluice.Clock
}

func (p algorithmPacer) Wait(ctx context.Context, n int64) error {
	for {
		d := p.a.AllowN(p.clock.Now(), n)
		if d.Allowed {
			return nil
		}
		if d.RetryAfter == sluice.Never {
			return ErrNeverAllowed
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Before(p.clock.Now().Add(d.RetryAfter)) {
			return sluice.ErrWouldExceedDeadline
		}
		if err := sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// sleep waits d, or until ctx is done and then returns its error.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxDrain bounds what is read of a response body to let its connection be
// reused; a longer body is closed unread.
const maxDrain = 64 << 10

// discard drains and closes a response body that will not be read.
func discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	body.Close()
}
