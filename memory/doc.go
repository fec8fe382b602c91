// Package memory keeps sluice's keyed limits in the process's memory.
//
// Two limiters, for two questions:
//
//   - Store answers "how many requests per period?" for every key, with
//     any of sluice's six algorithms. It implements sluice.Store: give it to
//     sluice.NewLimiter, or use it as the fallback of a Redis store
//     (sluice.WithFallback). Limits are per process; for one limit across
//     several processes, use package redis.
//   - Concurrency answers "how many requests at once?" for every key: a
//     request holds a Lease while it runs, and a lease that is never
//     released expires.
//
// Both take the time as a parameter, are safe for concurrent use, and hold
// at most WithMaxKeys keys and WithMaxBytes bytes, whichever binds first,
// however many distinct keys arrive and however long they are. Both start
// a goroutine that drops idle keys (WithSweepInterval); Close stops it.
package memory
