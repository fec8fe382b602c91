// Package sluice limits the rate of events: the classic rate-limiting
// algorithms, each taking the time as a parameter, and keyed limits built
// on them, kept in memory or in Redis.
//
// Which package for what:
//
//   - An HTTP server: package httplimit, middleware that answers 429 with
//     Retry-After and the RateLimit fields. A gRPC server: package
//     grpclimit (a module of its own), which answers RESOURCE_EXHAUSTED.
//   - Calls to someone else's API: package httpclient, a RoundTripper
//     that paces them and waits out the server's 429.
//   - Limits per key anywhere else (jobs, queues, a protocol of your
//     own): a Limiter over a Store (ExampleLimiter_Take), package memory's
//     in one process or package redis's for limits many processes share.
//   - Requests in flight rather than per period: package concurrency.
//   - One limit with no key, or a test of an algorithm: this package's
//     TokenBucket, GCRA, SlidingLog and the others; LeakyQueue delays
//     rather than denies.
//   - A rate-limit service for Envoy, nginx or Traefik: sluice serve
//     (github.com/sluicehq/sluice/cmd/sluice).
//
// No algorithm reads a clock or sleeps: every decision takes the time from
// the caller, so a test replays any history exactly, and a handler passes
// SystemClock.Now(), a time that does not go back when the wall clock does.
//
//	lim, err := sluice.NewTokenBucket(sluice.PerSecond(5)) // 5 a second, burst 5
//	if err != nil {
//		log.Fatal(err)
//	}
//	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
//	for range 5 {
//		lim.AllowN(t0, 1) // the burst: all five allowed
//	}
//	d := lim.AllowN(t0, 1)
//	fmt.Println(d.Allowed, d.RetryAfter) // false 200ms
//	d = lim.AllowN(t0.Add(d.RetryAfter), 1)
//	fmt.Println(d.Allowed, d.Remaining) // true 0
//
// A denial is a Decision with Allowed false, never an error; errors are for
// bad input and, in a Limiter, for the store and the context. Choosing an
// algorithm, rules charged by usage (Charge), many keys and failure modes
// (Failure) are in docs/library.md:
// https://github.com/sluicehq/sluice/blob/main/docs/library.md
package sluice
