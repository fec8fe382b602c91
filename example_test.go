package sluice_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// Every decision takes the time as a parameter: the examples replay a
// burst of requests at one instant.
var t0 = time.Date(2025, time.March, 3, 12, 0, 0, 0, time.UTC)

func ExampleNewTokenBucket() {
	tb, err := sluice.NewTokenBucket(sluice.PerSecond(5))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 7 {
		d := tb.AllowN(t0, 1)
		fmt.Printf("request %d: allowed %v, remaining %d, retry after %v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// A token comes back every 200ms.
	d := tb.AllowN(t0.Add(200*time.Millisecond), 1)
	fmt.Println("200ms later:", d.Allowed)
	// Output:
	// request 1: allowed true, remaining 4, retry after 0s
	// request 2: allowed true, remaining 3, retry after 0s
	// request 3: allowed true, remaining 2, retry after 0s
	// request 4: allowed true, remaining 1, retry after 0s
	// request 5: allowed true, remaining 0, retry after 0s
	// request 6: allowed false, remaining 0, retry after 200ms
	// request 7: allowed false, remaining 0, retry after 200ms
	// 200ms later: true
}

func ExampleNewLeakyBucket() {
	// 2 per second, with room for 4: the bucket starts empty and leaks
	// one unit every 500ms.
	lb, err := sluice.NewLeakyBucket(sluice.Limit{Rate: 2, Period: time.Second, Burst: 4})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lb.AllowN(t0, 3).Allowed) // 3 of 4
	fmt.Println(lb.AllowN(t0, 2).Allowed) // 5 would overflow
	d := lb.AllowN(t0.Add(time.Second), 2)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter) // 1 left after a second, then 3
	// Output:
	// true
	// false
	// true 1 1.5s
}

func ExampleNewGCRA() {
	// 3 per second: the emission interval is 333333333.3ns. GCRA keeps it
	// exact, so the 4th request fits at exactly ⌈10^9/3⌉ ns, not before.
	g, err := sluice.NewGCRA(sluice.PerSecond(3))
	if err != nil {
		log.Fatal(err)
	}
	g.AllowN(t0, 3)
	d := g.AllowN(t0, 1)
	fmt.Println(d.Allowed, d.RetryAfter.Nanoseconds())
	fmt.Println(g.AllowN(t0.Add(333333333), 1).Allowed)
	fmt.Println(g.AllowN(t0.Add(333333334), 1).Allowed)
	// Output:
	// false 333333334
	// false
	// true
}

func ExampleNewFixedWindow() {
	// The fixed window's known flaw: 5 at the end of one second and 5 at
	// the start of the next all pass.
	fw, err := sluice.NewFixedWindow(sluice.PerSecond(5))
	if err != nil {
		log.Fatal(err)
	}
	passed := 0
	for _, at := range []time.Duration{900 * time.Millisecond, time.Second} {
		for range 5 {
			if fw.AllowN(t0.Add(at), 1).Allowed {
				passed++
			}
		}
	}
	fmt.Println(passed, "passed in 100ms")
	// Output:
	// 10 passed in 100ms
}

func ExampleNewSlidingLog() {
	// The sliding log is exact: the window (now-1s, now] never holds more
	// than 5, boundary or not.
	sl, err := sluice.NewSlidingLog(sluice.PerSecond(5))
	if err != nil {
		log.Fatal(err)
	}
	sl.AllowN(t0.Add(900*time.Millisecond), 5)
	d := sl.AllowN(t0.Add(time.Second), 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// false 900ms
}

func ExampleNewSlidingCounter() {
	// The previous window's count weighs in proportion to how much of it
	// the sliding window still covers.
	sc, err := sluice.NewSlidingCounter(sluice.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	sc.AllowN(t0, 10)
	// Halfway into the next second the estimate is 10·0.5 = 5.
	d := sc.AllowN(t0.Add(1500*time.Millisecond), 0)
	fmt.Println(d.Remaining)
	// Output:
	// 5
}

func ExampleLeakyQueue_Reserve() {
	// A queue of 3 at 5 per second: requests leave 200ms apart; a 4th is
	// refused until the head has left.
	q, err := sluice.NewLeakyQueue(sluice.Limit{Rate: 5, Period: time.Second, Burst: 3})
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		release, d := q.Reserve(t0, 1)
		if !d.Allowed {
			fmt.Println("refused, room in", d.RetryAfter)
			continue
		}
		fmt.Println("leaves at t0 +", release.Sub(t0))
	}
	// Output:
	// leaves at t0 + 0s
	// leaves at t0 + 200ms
	// leaves at t0 + 400ms
	// refused, room in 200ms
}

func ExampleLimit_String() {
	fmt.Println(sluice.PerMinute(100))
	fmt.Println(sluice.Limit{Rate: 10, Period: time.Second, Burst: 50})
	// Output:
	// 100/1m0s
	// 10/1s burst 50
}

// The time is the caller's: a test replays any history exactly, without
// sleeping. The package documentation and the README show this example.
func Example_timeIsAParameter() {
	lim, err := sluice.NewTokenBucket(sluice.PerSecond(5)) // 5 a second, burst 5
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 5 {
		lim.AllowN(t0, 1) // the burst: all five allowed
	}
	d := lim.AllowN(t0, 1)
	fmt.Println(d.Allowed, d.RetryAfter) // false 200ms
	d = lim.AllowN(t0.Add(d.RetryAfter), 1)
	fmt.Println(d.Allowed, d.Remaining) // true 0
	// Output:
	// false 200ms
	// true 0
}

// Keyed limits: a Limiter decides a request against several rules at
// once, each applied to its key, in a store that many requests share. The
// package documentation shows this example.
func ExampleLimiter_Take() {
	store, err := memory.New() // in this process; redis.New(client) to share limits
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}

	// Rules are prepared once, where they are loaded.
	perIP, err := limiter.Prepare(sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(100)})
	if err != nil {
		log.Fatal(err)
	}
	perKey, err := limiter.Prepare(sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerHour(2)})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := limiter.Take(context.Background(), []sluice.Check{
			{Rule: perIP, Key: "203.0.113.7"}, // Cost unset: one request
			{Rule: perKey, Key: "alice"},
		}, nil)
		if err != nil {
			log.Fatal(err) // bad input or the context; a store failure is res.Err
		}
		if !res.Allowed {
			fmt.Println("denied: retry in", res.RetryAfter.Round(time.Minute))
			continue
		}
		fmt.Println("allowed:", res.Remaining, "left")
	}
	// Output:
	// allowed: 1 left
	// allowed: 0 left
	// denied: retry in 30m0s
}

// An LLM token budget per API key: peek when a request arrives, charge
// the tokens it used when it ends. The charge that goes
// past the budget is recorded, so the next check is denied until the
// debt has drained.
func ExampleChargeUsage() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	apiKey := "key-1"

	tokens, err := limiter.Prepare(sluice.Rule{Name: "tokens", Algorithm: sluice.AlgoTokenBucket,
		Limit: sluice.PerHour(1000), Charge: sluice.ChargeUsage})
	if err != nil {
		log.Fatal(err)
	}
	for _, used := range []int64{600, 700, 100} {
		res, err := limiter.Take(ctx, []sluice.Check{{Rule: tokens, Key: apiKey, Peek: true}}, nil) // on the way in
		if err != nil {
			log.Fatal(err)
		}
		if !res.Allowed {
			fmt.Println("denied: retry in", res.RetryAfter.Round(time.Minute))
			continue
		}
		// … serve the request; then, on the way out:
		res, err = limiter.Take(ctx, []sluice.Check{{Rule: tokens, Key: apiKey, Cost: used}}, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("used", used, "within the budget:", res.Allowed, "left:", res.Remaining)
	}
	// Output:
	// used 600 within the budget: true left: 400
	// used 700 within the budget: false left: 0
	// denied: retry in 18m0s
}

// The registry lists every algorithm, with what configuration and
// documentation say of it.
func ExampleAlgoInfos() {
	for _, a := range sluice.AlgoInfos() {
		fmt.Printf("%-15s %-15s bucket=%v\n", a.ID, a.Name, a.Bucket)
	}
	// Output:
	// token_bucket    token bucket    bucket=true
	// leaky_bucket    leaky bucket    bucket=true
	// gcra            GCRA            bucket=true
	// fixed_window    fixed window    bucket=false
	// sliding_log     sliding log     bucket=false
	// sliding_counter sliding counter bucket=false
}
