package fields_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// The fields of a request denied by one of two rules.
func Example() {
	rules := []sluice.Rule{
		{Name: "per-ip", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(3)},
		{Name: "daily", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(10000)},
	}
	res := sluice.Decision{RetryAfter: 19500 * time.Millisecond} // the combined decision
	decisions := []sluice.Decision{
		{Remaining: 0, RetryAfter: 19500 * time.Millisecond, ResetAfter: time.Minute},
		{Allowed: true, Remaining: 9957, ResetAfter: 9 * time.Hour},
	}

	retry := fields.RetryAfter(res)
	var policy, limit []byte
	for i := range rules {
		name, member, err := fields.Policy(&rules[i])
		if err != nil {
			panic(err)
		}
		policy = fields.Append(policy, member)
		limit = fields.AppendLimit(limit, name, decisions[i], retry)
	}
	fmt.Printf("RateLimit-Policy: %s\nRateLimit: %s\nRetry-After: %d\n", policy, limit, retry)
	// Output:
	// RateLimit-Policy: "per-ip";q=3;w=60, "daily";q=10000;w=86400
	// RateLimit: "per-ip";r=0;t=20, "daily";r=9957;t=20
	// Retry-After: 20
}
