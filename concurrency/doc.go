// Package concurrency limits the requests in flight per key: "at most 20
// requests of this customer at once", where package memory and package
// redis limit requests per period. A request holds a Lease while it runs;
// a lease never released (a crashed handler, a lost connection) expires
// after its ttl, so a dead holder gives its place back by itself.
//
// A Limiter takes the time as a parameter, is safe for concurrent use, and
// is bounded in memory by its options (WithMaxKeys, WithMaxBytes,
// WithShards, WithSweepInterval): however many distinct keys arrive, it
// holds at most so many. Its leases live in this process; it is not shared
// between servers.
package concurrency
