// Package algo holds the arithmetic of sluice's algorithms as pure state
// machines: a state, a time in Unix nanoseconds and a cost go in; a decision
// and the next state come out. Nothing here locks, reads a clock or
// allocates. The public types in package sluice and the memory store wrap
// these with their own synchronisation, so one piece of arithmetic serves a
// single limiter and millions of keys alike; the one lock-free step, a
// bucket's compare-and-swap (TAT.Allow), is here too, for both of them.
//
// A rule's arithmetic is compiled once, into a Spec, which the rule keeps
// (sluice.PreparedRule) and every store reads (Of).
package algo

import (
	"math"
	"math/bits"
	"time"
)

// Never is the RetryAfter of a request that can never be allowed.
const Never = time.Duration(math.MaxInt64)

// Decision mirrors sluice.Decision field for field, so that package sluice
// converts it without copying by hand.
type Decision struct {
	Allowed    bool
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Cached     bool // no algorithm sets it: a store's cache does
}

// ceilDiv returns ⌈a/b⌉ as a duration in nanoseconds, or Never when it does
// not fit. b must be positive.
func ceilDiv(a, b uint64) time.Duration {
	q := a / b
	if a%b != 0 {
		q++
	}
	if q >= uint64(Never) {
		return Never
	}
	return time.Duration(q)
}

// floorDiv is integer division rounding toward negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// mulOK returns a*b and whether it fits in an int64. a, b >= 0.
func mulOK(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
