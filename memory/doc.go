// Package memory keeps sluice's keyed limits in the process's memory.
//
// Store answers "how many requests per period?" for every key, with any
// of sluice's algorithms (sluice.Algos). It implements sluice.Store: give
// it to sluice.NewLimiter, or use it as the fallback of a Redis store
// (sluice.WithFallback). Limits are per process; for one limit across
// several processes, use package redis. For "how many requests at once?",
// use package concurrency.
//
// A Store takes the time as a parameter, is safe for concurrent use, and
// holds at most WithMaxKeys keys and WithMaxBytes bytes, whichever binds
// first, however many distinct keys arrive and however long they are. It
// starts a goroutine that drops idle keys (WithSweepInterval); Close
// stops it.
//
// At its bounds, a Store makes room for a new key by evicting an idle key
// (nothing is lost), else a key that would still allow, least recently
// used first (its client may be admitted again what it had used); a key
// that would deny is never evicted, so no flood of new keys resets a
// client that spent its limit. A new key that finds no room is refused
// with ErrFull, and a sluice.Limiter decides it by the rule's failure
// mode; a request that brings a new key beside keys the store holds is
// still denied, with no error, when one of those keys denies it, so that
// a new key riding along never hands a spent one to the failure modes. A bucket key (token bucket, leaky bucket, GCRA) of up to 16 bytes
// is counted 64 bytes, so WithMaxBytes(64 << 20) with WithMaxKeys of a
// little over a million holds a million denying keys; the Store
// documentation gives the figures for the other algorithms and for longer
// keys. Stats counts the evictions and refusals.
package memory
