package sluice

import (
	"context"
	"time"
)

// Check is one rule applied to one key: "requests per IP" for
// "203.0.113.7". A request is decided against one or more checks together.
type Check struct {
	Rule *Rule
	Key  string
}

// Store keeps per-key state and decides checks against it. The memory
// store (package memory) and the Redis store (package redis) implement it,
// and the conformance suite in package storetest holds them to the same
// decisions as the single-key algorithms.
type Store interface {
	// Take decides a request of cost n against checks together, writing
	// check i's decision to out[i]; len(out) must be at least len(checks).
	// If every check allows, each is charged n; if any denies, none is
	// (all-or-nothing). A check whose rule is in shadow mode never blocks
	// the others: its own decision is reported, and it is charged only
	// when it allows. n = 0 peeks; a negative n is refused and charges
	// nothing.
	//
	// now is the caller's time; a store with a clock of its own (Redis
	// TIME) may use that instead. The error is for the store and ctx only:
	// a denial is a decision.
	Take(ctx context.Context, now time.Time, n int64, checks []Check, out []Decision) error
}
