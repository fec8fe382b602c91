package server_test

import (
	"context"
	"fmt"
	"log"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server"
)

// A Server decides RLS requests in process too; Serve or ListenAndServe
// put it on the network.
func Example() {
	store, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	policy, err := config.Parse("shop.yaml", []byte(`
domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
`))
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC) // the clock stands still
	srv, err := server.New(server.Settings{
		Policy: policy,
		Store:  store,
		Clock:  sluice.ClockFunc(func() time.Time { return now }),
	})
	if err != nil {
		log.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{
		Domain: "shop",
		Descriptors: []*ratelimitpb.RateLimitDescriptor{{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
		}},
	}
	for range 3 {
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
		for _, h := range resp.GetResponseHeadersToAdd() {
			fmt.Printf("  %s: %s\n", h.GetKey(), h.GetValue())
		}
	}
	// Output:
	// OK 1 30s
	//   RateLimit-Policy: "shop.user";q=2;w=60
	//   RateLimit: "shop.user";r=1;t=30
	// OK 0 30s
	//   RateLimit-Policy: "shop.user";q=2;w=60
	//   RateLimit: "shop.user";r=0;t=30
	// OVER_LIMIT 0 30s
	//   RateLimit-Policy: "shop.user";q=2;w=60
	//   RateLimit: "shop.user";r=0;t=30
	//   Retry-After: 30
}
