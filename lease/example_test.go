package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memory"
)

// A Store decides the leased rules on shares from an authority, the others
// in an exact store. The memory authority serves the Stores of one
// process; processes sharing a Redis use the Redis one.
func ExampleStore() {
	exact, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer exact.Close()
	st, err := lease.New(exact, lease.NewMemoryAuthority(), lease.WithHolder("web-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(context.Background())

	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := sluice.NewLimiter(st, sluice.WithClock(sluice.ClockFunc(func() time.Time { return t0 })))
	if err != nil {
		log.Fatal(err)
	}
	rule, err := lim.Prepare(sluice.Rule{Name: "api", Algorithm: sluice.AlgoFixedWindow,
		Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	if err != nil {
		log.Fatal(err)
	}
	allowed := 0
	for range 80 {
		res, err := lim.Take(context.Background(), []sluice.Check{{Rule: rule, Key: "tenant-1"}}, nil)
		if err != nil {
			log.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	// A key's first holder, before it has reported any demand, is given
	// half the limit: the rest waits for the other holders, or for its
	// next renewal.
	fmt.Println("allowed", allowed)
	for _, h := range st.Leases() {
		fmt.Println(h.Rule, h.Key, h.Kind, "share", h.Share, "expires", h.Expires.Sub(t0))
	}
	// Output:
	// allowed 50
	// api tenant-1 window share 50 expires 300ms
}
