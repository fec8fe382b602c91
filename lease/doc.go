// Package lease decides rate limits on quota leased from a shared
// authority: each process holds a share of a key's quota, in proportion to
// its demand, and decides locally from it with the same algorithms,
// renewing its share as it goes. It trades the shared round trip of every
// exact decision (a Redis script per request) for one renewal per key per
// Renew interval, at the bound stated below.
//
// # When to choose it
//
// Exact limits (the memory and Redis stores on their own) are the default
// and the right choice for small limits, limits of one process, and
// anything where a key must never pass its limit even when Redis loses
// its data. Choose a lease (sluice.Rule.Lease) for a limit many
// processes share at a high rate, where the shared store's work per
// decision is the cost: a renewal per key every Renew (Period/10 by
// default) whatever the traffic, instead of a shared operation per
// decision. Leases are offered for the token bucket, the leaky bucket,
// GCRA and the fixed window, charged as a gate; sluice.Rule.Validate
// refuses the others.
//
//	st, err := lease.New(exact, authority) // exact: a sluice.Store for the other rules
//	...
//	lim, err := sluice.NewLimiter(st)
//	...
//	rule, err := lim.Prepare(sluice.Rule{Name: "api", Algorithm: sluice.AlgoTokenBucket,
//		Limit: sluice.PerSecond(10_000), Lease: sluice.Lease{Enabled: true}})
//
// # The bound
//
// Over-admission. With C = Rate, B = the capacity, P = Period, TTL the
// lease's time to live: the authority never grants shares that sum past C
// (nor bursts past B), and a holder stops deciding on its share at its
// own send time of the renewal plus TTL, never later than the authority
// forgets it. So in normal operation a key admits no more than its exact
// algorithm does: a bucket at most B + d·C/P over any interval d, a fixed
// window at most C per window, up to C·δ/P moving across a boundary when
// holders' clocks differ by δ. (A new bucket lease starts with no tokens,
// unless no one holds the key: then with what the key's bucket refilled
// since its last lease ended, StartTokens, which the exact bucket holds
// too.)
//
// A fault admits more: an authority forgetting grants still
// live (Redis restarted without persistence, a failover that lost
// writes, a flush): then up to C·TTL/P more for a bucket, and a burst
// that a new holder of the forgotten key starts with, and for a window up
// to C more in the window of the loss, once per such loss; with TTL three
// Renews by default, C·TTL/P is 3·C·Renew/P, whatever the number of
// holders. The same holds for a renewal whose reply is lost (it timed out
// after the authority answered): its holder keeps its previous share
// until its lease expires while the authority may have given part of it
// to others, at most C·TTL/P more per lost reply for a bucket, and for a
// window up to its previous share more in each window until that lease
// expires.
//
// A quiet key, whose holders ask at most half of C, renews less often: a
// holder whose share is at least 1.5 times its demand (a lone holder's is)
// doubles its interval at each renewal, up to 32 Renews or 10s, and asks a
// TTL as much longer (the interval plus TTL − Renew); the first request it
// denies, or a key no longer quiet, brings it back to Renew. The shares
// still never sum past C, so the bound in normal operation is the same;
// the faults above count with that longer TTL, up to C·(10s + TTL −
// Renew)/P for a quiet key, and a holder cut off decides, or a holder
// killed keeps its share, that much longer.
//
// A holder cut off
// from the authority decides on its lease until it expires, then by the
// rule's failure mode (sluice.Failure), through the Limiter. A holder
// killed gives its share back when its lease expires, a TTL at most (a
// fixed-window holder's is counted until the window it expired in has
// ended, since it may have admitted up to its allowance there).
//
// Under-admission, measured rather than bounded (BENCHMARKS.md): shares
// are whole units per Period, less than one unit per holder per Period;
// on a quiet key (demand at most half the limit) a part is kept free for
// a newcomer; a new lease beside a live holder starts with no tokens, and
// on a busier key a newcomer waits for the others' next renewals, a Renew
// at most, for its share; and a share moving between holders
// is idle between the renewal of the one giving it up and the renewal of
// the one taking it, a Renew interval at most per shift of demand.
//
// # Internals
//
// Allocate is the division every authority computes, the Redis one in
// Lua with the same float64 operations: a holder's target is its demand
// plus an equal part of what is unused when the total demand fits (less
// a part left for a newcomer on a quiet key), else
// its proportional part; its share is the target less what the others
// hold. A holder's demand is the units asked of it, allowed or denied, per
// Period, smoothed over its renewal intervals.
//
// On the holder's side each key has a core with time as a parameter: a
// Bucket holder is a token bucket refilled at its share (a share that
// shrank is charged from the renewal's send time, one that grew counts
// from its arrival); a Window holder admits, in the window of its last
// renewal, up to the allowance the authority counted for it there, and
// its share in later windows; while a renewal is in flight it admits no
// more than it reported as used plus a reserve of one Renew interval's
// demand, which the authority counts for it. A holder renews every Renew,
// and early (after an eighth of Renew) when it denies on its share while
// the last grant left part of the quota unasked for: a first grant, made
// before any demand was measured, is half the quota at most. The Store
// runs the renewals in the background, one per key at a time and a bounded
// number of calls in flight; with an authority that renews many keys in
// one call (a Batcher, such as Redis's), the routine renewals due within a
// few milliseconds of each other go together. It keeps a bounded table of
// keys, dropping those idle for a TTL (and, for a window, until the window
// they admitted in has ended, so that the authority never forgets units
// admitted in an open window).
package lease
