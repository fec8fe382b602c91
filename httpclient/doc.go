// Package httpclient is the client side of rate limiting: an
// http.RoundTripper that paces outgoing requests with a sluice limiter and
// honours the server's 429 Too Many Requests, Retry-After and RateLimit
// fields, with backoff, within each request's context.
//
// Choose the pacing by what the server promises:
//
//   - WithAlgorithm with a sluice.GCRA or TokenBucket of the server's
//     published limit: requests go at once while the burst lasts, then
//     each waits its RetryAfter. Waiting requests are not served in order.
//   - WithPacer with a sluice.LeakyQueue: requests leave evenly spaced and
//     in order, and are refused at once past the queue's size
//     (sluice.ErrQueueFull).
//   - Neither: requests go as they come, and only the server's 429s,
//     Retry-After and RateLimit fields slow them down.
//
// The Transport retries only what can be sent again (no body, or
// Request.GetBody) and never waits longer than WithMaxWait on the
// server's word or past the request's deadline: it returns the 429
// instead.
package httpclient
