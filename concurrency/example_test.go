package concurrency_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/concurrency"
)

// At most two requests of a customer in flight: the third waits for a
// release, or for a lease to expire if its holder never comes back.
func Example() {
	inflight, err := concurrency.New()
	if err != nil {
		log.Fatal(err)
	}
	defer inflight.Close()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const limit, ttl = 2, 30 * time.Second
	first, d, _ := inflight.Acquire(now, "customer-42", limit, ttl)
	fmt.Println("first:", d.Allowed, "remaining", d.Remaining)
	_, d, _ = inflight.Acquire(now, "customer-42", limit, ttl)
	fmt.Println("second:", d.Allowed, "remaining", d.Remaining)
	_, d, _ = inflight.Acquire(now, "customer-42", limit, ttl)
	fmt.Println("third:", d.Allowed, "retry after", d.RetryAfter)

	inflight.Release(first) // the first request is done
	_, d, _ = inflight.Acquire(now, "customer-42", limit, ttl)
	fmt.Println("third again:", d.Allowed)
	// Output:
	// first: true remaining 1
	// second: true remaining 0
	// third: false retry after 30s
	// third again: true
}

// A Limiter sized for the keys expected in flight at once; a bad option
// is an error, not a panic.
func ExampleNew() {
	inflight, err := concurrency.New(concurrency.WithMaxKeys(10_000), concurrency.WithMaxBytes(4<<20))
	if err != nil {
		log.Fatal(err)
	}
	defer inflight.Close()

	_, err = concurrency.New(concurrency.WithShards(0))
	fmt.Println(err)
	fmt.Println(errors.Is(err, concurrency.ErrInvalidOption))
	// Output:
	// concurrency: invalid option: shards 0 must be between 1 and 4096
	// true
}
