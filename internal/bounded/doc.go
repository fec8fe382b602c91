// Package bounded holds what sluice's two in-memory keyed structures, the
// memory store and the concurrency limiter, share: their options and the
// checks on them, the count of keys and bytes held against the bounds, the
// copy of a key, and the background sweeper with the Close that stops it.
//
// The options are memory's (memory.Option is an alias of Option); the
// error values are re-exported by package memory under the same names,
// so callers of either structure test for memory.ErrInvalidOption and
// memory.ErrTooLarge.
package bounded
