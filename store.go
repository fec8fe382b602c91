package sluice

import (
	"context"
	"time"
)

// Check is one rule applied to one key, at a cost: "requests per IP" for
// "203.0.113.7", one request. A request is decided against one or more
// checks together.
type Check struct {
	// Rule is the rule, prepared (Rule.Prepare); nil or a zero
	// PreparedRule is refused.
	Rule *PreparedRule
	// Key is what the rule is applied to: an address, a user, an API key.
	Key string
	// Cost is what the check takes from its limit, in the rule's units:
	// 1 for a request counted once, the tokens of an LLM call for a limit
	// in tokens. Zero means 1, so that the zero Check is one request; a
	// negative Cost is refused (the check denies, Never, and charges
	// nothing).
	Cost int64
	// Peek asks for the state without taking anything: the check costs 0
	// whatever its Cost, and a Cost beside it is refused by the Limiter.
	Peek bool
}

// Units is what the check takes: 0 for a peek, else Cost, 1 when Cost is
// zero.
func (c *Check) Units() int64 {
	switch {
	case c.Peek:
		return 0
	case c.Cost == 0:
		return 1
	}
	return c.Cost
}

// Store keeps per-key state and decides checks against it. The memory
// store (package memory) and the Redis store (package redis) implement it,
// and the conformance suite in package storetest holds them to the same
// decisions as the single-key algorithms.
type Store interface {
	// Take decides a request against checks together, writing check i's
	// decision to out[i]; len(out) must be at least len(checks). Each
	// check costs its Units. A request is allowed iff every check not in
	// shadow mode allows. The checks are charged by their rules' Charge:
	//
	//   - A usage check (ChargeUsage, ChargeCount) is recorded its cost
	//     whether it allows or not, and whatever the other checks say,
	//     into debt capped at one more capacity. A peek records nothing
	//     and allows iff a unit is left (ChargeUsage) or the limit is not
	//     in debt (ChargeCount).
	//   - The gate checks (ChargeGate) are all-or-nothing: if the request
	//     is allowed, each is charged its cost; if not, none is, and one
	//     that would have allowed reports its state uncharged. A peek
	//     allows.
	//
	// The usage checks are decided first, then the gate checks; in each,
	// the checks not in shadow mode come first. A check whose rule is in
	// shadow mode never blocks the others: its own decision is reported,
	// and a shadow gate check is charged only when it allows. A negative
	// cost is refused (the check denies, Never) and the check charges
	// nothing. A check whose rule is nil or not prepared is refused with
	// an error.
	//
	// now is the caller's time; a store with a clock of its own (Redis
	// TIME) may use that instead. ctx bounds the call, and a store with a
	// deadline of its own (the Redis store's timeout) applies it. The
	// error is for the store and ctx only: a denial is a decision.
	Take(ctx context.Context, now time.Time, checks []Check, out []Decision) error
}

// RuleChecker is implemented by a store that cannot hold every rule the
// algorithms can (the Redis store, whose arithmetic must stay exact in
// Lua's doubles). CheckRule reports, deciding nothing, whether the store
// can hold r: nil, or the error a Take with r would return — for a rule
// out of the store's range, one wrapping ErrRefused. Limiter.Prepare asks
// it, so that the middleware and the service learn it when they are made
// or load a config.
type RuleChecker interface {
	CheckRule(r *PreparedRule) error
}
