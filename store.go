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
	// Cost, if not zero, is what this check costs in place of the
	// request's cost: for a request counted in different units by
	// different rules, one per request and one per token, say. Zero
	// means the request's cost; a negative Cost is refused as a negative
	// cost is.
	Cost int64
}

// CostFor is the check's cost in a request of cost n: its Cost, or n.
func (c *Check) CostFor(n int64) int64 {
	if c.Cost != 0 {
		return c.Cost
	}
	return n
}

// Store keeps per-key state and decides checks against it. The memory
// store (package memory) and the Redis store (package redis) implement it,
// and the conformance suite in package storetest holds them to the same
// decisions as the single-key algorithms.
type Store interface {
	// Take decides a request of cost n against checks together, writing
	// check i's decision to out[i]; len(out) must be at least len(checks).
	// Each check costs its CostFor(n): n, or its own Cost. A request is
	// allowed iff every check not in shadow mode allows. The checks are
	// charged by their rules' Charge:
	//
	//   - A usage check (ChargeUsage, ChargeCount) is recorded its cost
	//     whether it allows or not, and whatever the other checks say,
	//     into debt capped at one more capacity. Its cost 0 records
	//     nothing and allows iff a unit is left (ChargeUsage) or the
	//     limit is not in debt (ChargeCount).
	//   - The gate checks (ChargeGate) are all-or-nothing: if the request
	//     is allowed, each is charged its cost; if not, none is, and one
	//     that would have allowed reports its state uncharged. A cost of 0
	//     peeks and allows.
	//
	// The usage checks are decided first, then the gate checks; in each,
	// the checks not in shadow mode come first. A check whose rule is in
	// shadow mode never blocks the others: its own decision is reported,
	// and a shadow gate check is charged only when it allows. A negative
	// cost is refused (the check denies, Never) and the check charges
	// nothing.
	//
	// now is the caller's time; a store with a clock of its own (Redis
	// TIME) may use that instead. The error is for the store and ctx only:
	// a denial is a decision.
	Take(ctx context.Context, now time.Time, n int64, checks []Check, out []Decision) error
}

// RuleChecker is implemented by a store that cannot hold every rule the
// algorithms can (the Redis store, whose arithmetic must stay exact in
// Lua's doubles). CheckRule reports, deciding nothing, whether the store
// can hold r: nil, or the error a Take with r would return — for a valid
// rule out of the store's range, one wrapping ErrRefused. Limiter.CheckRule
// asks it; the middleware and the service check their rules so when they
// are made or load a config.
type RuleChecker interface {
	CheckRule(r *Rule) error
}
