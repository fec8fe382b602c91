// Package redis is a sluice.Store in Redis: one limit shared by every
// process that talks to the same Redis (a single node, Sentinel or
// Cluster) through a go-redis v9 client. Choose it when several instances
// of a service enforce one limit; package memory, per process, makes a
// good fallback beside it. Build the client with the options that matter
// here (Example shows a whole program):
//
//	client := goredis.NewClient(&goredis.Options{
//		Addr:                  "localhost:6379",
//		MaxRetries:            -1,   // a retried script run could charge twice
//		ContextTimeoutEnabled: true, // the deadline then holds without a goroutine
//	})
//	store, err := redis.New(client, redis.WithPrefix("myapp:"))
//	lim, err := sluice.NewLimiter(store, sluice.WithFallback(memoryStore))
//
// New takes a Sentinel or cluster client as well. Call Store.Load before
// taking traffic, so that a cold start does not load the script on every
// first call. Options: WithPrefix; WithTimeout (50ms) for a call and its
// wait for a turn; WithMaxInFlight, WithMaxBatch, WithBreaker and
// WithDenyCache for load and outages; WithCallerTime to decide at the
// callers' time, not Redis TIME; WithHashTag, WithoutSplit and
// WithoutBatching for a Cluster. NewPair puts the per-second limits in a
// Redis of their own. What it guarantees:
//
//   - Exact: a request, all its checks, is decided by one run of one Lua
//     script, all or nothing, with the single-key algorithms' decisions.
//     A limit the script cannot hold exactly is refused before any call
//     (ErrOutOfRange, which wraps sluice.ErrRefused).
//   - Cluster: each run goes to the master that holds its keys. A request
//     whose keys sit on different masters is decided in parts, and when a
//     part denies, the others are given back, so that a denied request
//     leaves nothing charged once it returns. During that round trip a
//     concurrent request may see the charge; a give-back whose node stops
//     answering leaves its charge (Stats.GiveBackErrors).
//   - Outages and load: the sluice.Limiter applies each rule's
//     sluice.Failure to the store's errors, and a circuit breaker spares a
//     Redis that fails. A request that cannot get its turn in time is shed
//     (sluice.ErrShed) and denied, whatever the failure mode.
//   - Retries: go-redis retries a command after a network error
//     (MaxRetries, 3 by default). A script that ran but whose answer was
//     lost then charges twice: set MaxRetries to -1, as above, where exact
//     counts matter more than a retry. A give-back is safe to retry.
//
// Store.Authority is the lease.Authority of the processes that share the
// Redis: rules marked Lease are decided locally on a share of each key's
// quota, renewed through it (see Leases in docs/redis.md).
//
// How it works, in the sections its declarations refer to ("see Requests
// across slots"), is in docs/redis.md:
// https://github.com/sluicehq/sluice/blob/main/docs/redis.md
package redis
