package memory

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice"
)

// ErrFull is the error of a request that would add a key to a Store at
// its bounds when every key it may evict would deny: it wraps
// sluice.ErrNoRoom, so that a sluice.Limiter decides the request by its
// rules' failure modes, a rule that fails "local" as one that fails
// "open" (there is no second memory to fall back on). Nothing is charged.
var ErrFull = fmt.Errorf("memory: no room for a new key, every key sampled would deny: %w", sluice.ErrNoRoom)

// Stats are a Store's counts: what it holds, and what it has evicted or
// refused to make room since New.
type Stats struct {
	// Keys and Bytes are Len and Bytes.
	Keys  int
	Bytes int64
	// EvictedIdle counts the keys evicted to make room whose state was
	// back to idle: nothing was lost. Keys dropped by the sweeper are not
	// counted.
	EvictedIdle uint64
	// EvictedLive counts the keys evicted to make room that were not
	// idle but would still allow: each lets its client start afresh,
	// admitting at most what that key had used again.
	EvictedLive uint64
	// Refused counts the requests refused with ErrFull: a new key found
	// no room, every key sampled being one that would deny.
	Refused uint64
}

// Stats returns the Store's counts. It is safe to call at any time, and
// takes no lock.
func (s *Store) Stats() Stats {
	return Stats{
		Keys:        s.Len(),
		Bytes:       s.Bytes(),
		EvictedIdle: s.counts.idle.Load(),
		EvictedLive: s.counts.live.Load(),
		Refused:     s.counts.refused.Load(),
	}
}

// counts are a Store's evictions and refusals, shared by its shards and
// written only when room is made: never on a request for a key held.
type counts struct {
	idle, live, refused atomic.Uint64
}

// evicted counts an eviction victim chose as c.
func (ct *counts) evicted(c choice) {
	if c == choseIdle {
		ct.idle.Add(1)
	} else {
		ct.live.Add(1)
	}
}
