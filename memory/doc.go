// Package memory keeps sluice's keyed limits in the process's memory.
//
// Store answers "how many requests per period?" for every key, with any
// of sluice's six algorithms. It implements sluice.Store: give it to
// sluice.NewLimiter, or use it as the fallback of a Redis store
// (sluice.WithFallback). Limits are per process; for one limit across
// several processes, use package redis. For "how many requests at once?",
// use package concurrency, which takes this package's options.
//
// A Store takes the time as a parameter, is safe for concurrent use, and
// holds at most WithMaxKeys keys and WithMaxBytes bytes, whichever binds
// first, however many distinct keys arrive and however long they are. It
// starts a goroutine that drops idle keys (WithSweepInterval); Close
// stops it.
package memory
