package redis_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// A Limiter on Redis: 100 requests per minute per user, deciding at Redis
// TIME, failing open if Redis does not answer within 50ms.
func Example() {
	client := goredis.NewClient(&goredis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // the deadline then holds without a goroutine
		MaxRetries:            -1,   // a retried script could charge twice
	})
	defer client.Close()
	store, err := redis.New(client, redis.WithPrefix("myapp:"), redis.WithTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	lim, err := sluice.NewLimiter(store)
	if err != nil {
		panic(err)
	}
	// Prepared once, where the rule is loaded; the Limiter asks the store
	// whether it can hold it.
	perUser, err := lim.Prepare(sluice.Rule{Name: "per-user", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(100)})
	if err != nil {
		panic(err)
	}
	res, err := lim.Take(context.Background(), []sluice.Check{{Rule: perUser, Key: "alice"}}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Err)
}

// On a Redis Cluster, checks on different keys must share a hash tag to be
// decided together: here, per user and per user and route.
func ExampleWithHashTag() {
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"localhost:7000"}})
	defer client.Close()
	store, err := redis.New(client, redis.WithHashTag(func(c sluice.Check) string {
		user, _, _ := cutUser(c.Key)
		return user
	}))
	_, _ = store, err
}

// cutUser splits "alice/GET /orders" into the user and the rest.
func cutUser(key string) (user, rest string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return key, "", false
}
