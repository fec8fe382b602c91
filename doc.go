// Package sluice limits the rate of events: the classic rate-limiting
// algorithms, with time as a parameter, and keyed limits built on them.
//
// # Where to start
//
// Which package for what:
//
//   - An HTTP server: package httplimit, middleware that answers 429 with
//     Retry-After and the RateLimit fields, per client address, API key,
//     header or route.
//   - A gRPC server: package grpclimit (module
//     github.com/sluicehq/sluice/grpclimit), interceptors that answer
//     RESOURCE_EXHAUSTED.
//   - Calls to someone else's API: package httpclient, a RoundTripper that
//     paces outgoing requests and waits out the server's 429.
//   - Limits per key anywhere else (jobs, queues, a protocol of your own):
//     a Limiter over a Store, as below. The Store is package memory's for
//     one process, or package redis's (module
//     github.com/sluicehq/sluice/redis) for limits that many processes
//     share.
//   - Requests in flight rather than per period ("at most 20 at once per
//     customer"): package concurrency, leases that expire if never
//     released.
//   - One limit, with no key, or a test of an algorithm: the single-key
//     types of this package (TokenBucket, GCRA, SlidingLog, …), which take
//     the time as a parameter; LeakyQueue to delay rather than deny.
//   - A rate-limit service for Envoy, nginx or Traefik, configured in
//     YAML: the sluice command (github.com/sluicehq/sluice/cmd/sluice),
//     sluice serve.
//
// The middleware is a Limiter underneath. A Limiter decides a request
// against several rules at once, each a Rule (an algorithm and a Limit)
// applied to a key, all-or-nothing: allowed only if every rule allows,
// and then every rule is charged. (Usage rules are charged otherwise: see
// Usage recorded after the fact.)
//
//	store, err := memory.New() // in this process; redis.New(client) to share limits
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer store.Close()
//	limiter, err := sluice.NewLimiter(store)
//	if err != nil {
//		log.Fatal(err)
//	}
//
//	// Rules are prepared once, where they are loaded.
//	perIP, err := limiter.Prepare(sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(100)})
//	if err != nil {
//		log.Fatal(err)
//	}
//	perKey, err := limiter.Prepare(sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerHour(2)})
//	if err != nil {
//		log.Fatal(err)
//	}
//	for range 3 {
//		res, err := limiter.Take(context.Background(), []sluice.Check{
//			{Rule: perIP, Key: "203.0.113.7"}, // Cost unset: one request
//			{Rule: perKey, Key: "alice"},
//		}, nil)
//		if err != nil {
//			log.Fatal(err) // bad input or the context; a store failure is res.Err
//		}
//		if !res.Allowed {
//			fmt.Println("denied: retry in", res.RetryAfter.Round(time.Minute))
//			continue
//		}
//		fmt.Println("allowed:", res.Remaining, "left")
//	}
//
// This prints "allowed: 1 left", "allowed: 0 left" and "denied: retry in
// 30m0s" (ExampleLimiter_Take, which go test runs).
//
// # Time is a parameter
//
// No algorithm reads a clock or sleeps. Every decision takes the time from
// the caller:
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
// So a test replays any history exactly and without sleeping, and a server
// may decide with the request's own timestamp; in a handler, most callers
// pass SystemClock.Now(), a time that does not go back when the wall clock
// does. Only the edges read a clock, through the Clock interface:
// LeakyQueue.Wait and Limiter, both SystemClock by default.
//
// Time is kept in integer nanoseconds, with no float tokens, so nothing
// drifts after a billion calls. A time earlier than one already seen never
// mints capacity.
//
// A denial is a Decision with Allowed false, never an error; errors are for
// bad input (an invalid Limit) and, in Limiter, for the store and the
// context. A Decision also carries Remaining, RetryAfter (tight: the same
// request is allowed at now+RetryAfter if nothing else comes, and denied
// just before) and ResetAfter. AllowN(now, 0) peeks and consumes
// nothing.
//
// # Choosing an algorithm
//
// Every algorithm takes a Limit: Rate events per Period, plus Burst, the
// capacity of the buckets (Rate when 0). The windows ignore Burst.
//
//	algorithm       memory   bursts                      accuracy     output shape
//	TokenBucket     O(1)     up to Burst at once         exact bound  the average rate, bursts pass
//	LeakyBucket     O(1)     as TokenBucket              exact bound  as TokenBucket
//	GCRA            O(1)     as TokenBucket              exact bound  as TokenBucket
//	LeakyQueue      O(1)     queued, then spaced out     exact        an even stream
//	FixedWindow     O(1)     up to 2·Rate at a boundary  low          steps at each window
//	SlidingLog      O(Rate)  Rate in any window          exact        an exact window
//	SlidingCounter  O(1)     about Rate in any window    approximate  an approximate window
//
// The buckets hold exactly to their own bound, which is not a window's:
// over any interval d, at most Burst + d·Rate/Period pass, so up to
// Burst + Rate within one Period (Burst at once after an idle spell, then
// Rate more as the bucket refills).
//
// In words:
//
//   - TokenBucket lets an idle client spend Burst at once, then Rate per
//     Period: over any interval d, at most Burst + d·Rate/Period. It is the
//     usual choice for APIs, because it allows reasonable bursts.
//   - LeakyBucket is the leaky bucket as a meter (no queue) and GCRA is the
//     generic cell rate algorithm. The three bucket types make identical
//     decisions on every input: the leaky bucket's water is Burst minus the
//     token bucket's tokens, and GCRA's theoretical arrival time is the
//     moment that water runs dry. They are one piece of arithmetic on one
//     number, updated lock-free; pick the name your readers know.
//   - LeakyQueue is the leaky bucket as a shaper: instead of denying, it
//     delays. Requests wait in a queue of Burst units and leave Period/Rate
//     apart; past the queue's size they are refused at once. Use it for
//     outgoing calls to a service that cannot take bursts.
//   - FixedWindow counts per window aligned to the Unix epoch. It is the
//     cheapest and the simplest to explain, but Rate requests just before a
//     boundary and Rate just after it all pass: 2·Rate in a moment.
//   - SlidingLog remembers every allowed request of the last Period in a
//     ring buffer of Rate cells (package ring). It is exact: never more
//     than Rate in any window of length Period. It costs O(Rate) memory
//     per key, allocated once, and allows at most 2^20 per window.
//   - SlidingCounter estimates the sliding window from two counters, the
//     current window's and the previous one's weighted by how much of it
//     the sliding window still covers. O(1) memory and close to exact; it
//     assumes the previous window's requests were spread evenly, so it can
//     be off around a boundary. Cloudflare counts this way.
//
// The command sluice demo (go run ./cmd/sluice demo) replays a burst, a
// steady stream and a window boundary against each of them and prints
// what each allowed and denied.
//
// # Usage recorded after the fact
//
// There are two ways to charge a rule, its Charge. A gate rule
// (ChargeGate, the zero value) admits requests: a request it cannot
// afford is refused and charges nothing, and the rules of a request are
// charged all-or-nothing. A usage rule (ChargeUsage) counts what was used,
// known only once the work is done, such as an LLM's tokens, bytes sent
// or money spent: its cost is recorded whatever is left, so a limit can be
// taken past zero into debt (a bucket below empty, a window's count above
// its rate), and the request that went over is answered as over. The
// usual pattern peeks when a request arrives (Check.Peek), which records
// nothing and is allowed while a unit is left, and charges the real usage
// when it ends:
//
//	tokens, err := limiter.Prepare(sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoTokenBucket,
//		Limit: sluice.PerHour(1000), Charge: sluice.ChargeUsage})
//	if err != nil {
//		log.Fatal(err)
//	}
//	for _, used := range []int64{600, 700, 100} {
//		res, err := limiter.Take(ctx, []sluice.Check{{Rule: tokens, Key: apiKey, Peek: true}}, nil) // on the way in
//		if err != nil {
//			log.Fatal(err)
//		}
//		if !res.Allowed {
//			fmt.Println("denied: retry in", res.RetryAfter.Round(time.Minute))
//			continue
//		}
//		// … serve the request; then, on the way out:
//		res, err = limiter.Take(ctx, []sluice.Check{{Rule: tokens, Key: apiKey, Cost: used}}, nil)
//		if err != nil {
//			log.Fatal(err)
//		}
//		fmt.Println("used", used, "within the budget:", res.Allowed, "left:", res.Remaining)
//	}
//
// This prints "used 600 within the budget: true left: 400", "used 700
// within the budget: false left: 0" and "denied: retry in 18m0s"
// (ExampleChargeUsage): the charge of 700 took the budget 300 past zero,
// and a unit is back only once that has drained.
//
// Debt is capped at one capacity (a bucket's level never below -Burst, a
// window's count or a sliding log's units never above 2·Rate), so that no
// one locks a shared key out for long by charging it: a key left alone is
// whole again within two periods (two refills of Burst for a bucket). A
// rule of Rate 0 records only what fits. ChargeCount is ChargeUsage with
// envoyproxy/ratelimit's answer to a peek: over only when the
// limit is in debt, so at exactly nothing left it is allowed. A usage of
// zero is nothing to record: skip the charge (a Cost of 0 means 1).
//
// In a request of several checks, usage checks are always recorded, also
// when another check denies; gate checks are charged only when every
// check, usage ones included, allows. A shadow usage check is recorded
// and never blocks. When the store fails, each rule's Failure decides as
// for any rule, and a usage charge that missed the store is visible as
// Result.Err beside a usage check that is not a peek (FailLocal, and
// FailDefault with a fallback, record it in the fallback store). The
// single-key types are gate limiters: AllowN(now, 0) always peeks and
// allows.
//
// # Many keys
//
// A Rule names an algorithm (Algo) and a Limit; a Check applies a Rule,
// prepared, to a key at a cost; a Store keeps per-key state; a Limiter
// decides a request against several checks at once, all-or-nothing among
// gate rules, reading its Clock and applying each Rule's failure policy
// when the store fails. A Rule is a plain declaration; Prepare (or
// Limiter.Prepare, which also asks the store) validates and compiles it
// once, where it is loaded, into the PreparedRule that checks carry: a
// request validates nothing. Package storetest is the suite a Store of
// your own must pass.
//
// # When the store fails
//
// Each rule's Failure decides: FailOpen allows, FailClosed denies,
// FailLocal decides with the Limiter's fallback store (WithFallback), an
// in-process limiter, and fails closed without one. The zero value,
// FailDefault, is FailLocal when the Limiter has a fallback and FailOpen
// when it has none: giving a Limiter a fallback is enough to use it. A
// request the store shed (ErrShed) is denied whatever the rules say. The
// store bounds its own calls (the Redis store's timeout); the Limiter
// passes the caller's context through and adds no deadline.
package sluice
