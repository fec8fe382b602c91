package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// MaxHolders bounds the holders of one key, so that one hot key cannot
// make a renewal long; MaxKeyBytes bounds a key, and MaxTTL the TTL a
// renewal may ask for. Every authority refuses past them.
const (
	MaxHolders  = 1024
	MaxKeyBytes = 4096
	MaxTTL      = 7 * 24 * time.Hour
)

// The memory authority's keys, the longest holder id and TTL a request
// may carry, and how often a full table is swept.
const (
	maxMemoryKeys   = 100_000
	maxHolderBytes  = 256
	sweepMinimumAge = time.Second
)

// ErrAuthorityFull is wrapped by an authority's error for a renewal it has
// no room for: a new key when it holds as many as it keeps, or a new holder
// of a key that has MaxHolders. The renewal changes nothing; a Store
// answers the request with the error, so the rule's failure mode applies.
var ErrAuthorityFull = errors.New("lease: authority full")

// MemoryAuthority is the Authority of the processes of one address space:
// tests, the simulation, and a service on a memory store. It keeps time by
// the requests (Request.Now), never reading a clock: its time is the latest
// Now it has seen. It holds at most 100,000 keys and MaxHolders holders per
// key, forgetting the expired ones first. It is safe for concurrent use.
type MemoryAuthority struct {
	mu   sync.Mutex
	keys map[string]*memoryKey
	now  time.Time
	// swept is when the table was last swept for expired holdings, so
	// that a full table is swept at most once per sweepMinimumAge.
	swept time.Time
	// evicted is the latest end of a holding among the keys dropped
	// before their refill had passed, to make room: a new key counts its
	// idle time from it (StartTokens), as it may be one of them.
	evicted time.Time
}

var _ Authority = (*MemoryAuthority)(nil)

// memoryKey is one key's holdings, and the kind and period of its last
// renewal, which say when an expired holding is forgotten.
type memoryKey struct {
	hs     map[string]Holding
	kind   Kind
	period time.Duration
	// ended is when the key's last holding ended (expired or released),
	// zero if none has; kept until refill after it (StartTokens).
	ended  time.Time
	refill time.Duration
}

// NewMemoryAuthority returns an empty memory authority.
func NewMemoryAuthority() *MemoryAuthority {
	return &MemoryAuthority{keys: make(map[string]*memoryKey)}
}

// CheckRequest reports whether r is a renewal an authority can decide: a
// key and a holder, a known kind, a valid limit whose Rate is at most
// sluice.MaxLeaseQuota, a demand and a use not negative, and a positive
// TTL. Every authority refuses what it refuses, changing nothing.
func CheckRequest(r Request) error {
	switch {
	case r.Key == "" || len(r.Key) > MaxKeyBytes:
		return fmt.Errorf("lease: key of %d bytes (want 1 to %d)", len(r.Key), MaxKeyBytes)
	case r.Holder == "" || len(r.Holder) > maxHolderBytes:
		return fmt.Errorf("lease: holder of %d bytes (want 1 to %d)", len(r.Holder), maxHolderBytes)
	case r.Kind != Bucket && r.Kind != Window:
		return fmt.Errorf("lease: unknown kind %d", r.Kind)
	case r.Demand < 0 || r.Used < 0:
		return fmt.Errorf("lease: demand %d and used %d must not be negative", r.Demand, r.Used)
	case r.TTL <= 0 || r.TTL > MaxTTL:
		return fmt.Errorf("lease: ttl %v (want above 0, at most %v)", r.TTL, MaxTTL)
	}
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	if r.Limit.Rate > sluice.MaxLeaseQuota || r.Limit.Capacity() > sluice.MaxLeaseQuota {
		return fmt.Errorf("lease: limit %v is above %d, the most a lease divides exactly", r.Limit, sluice.MaxLeaseQuota)
	}
	return nil
}

// Renew implements Authority: it forgets the key's expired holders,
// computes the grant with Allocate, and keeps the holding until r.Now +
// r.TTL.
func (a *MemoryAuthority) Renew(ctx context.Context, r Request) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	if err := CheckRequest(r); err != nil {
		return Grant{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Now.After(a.now) {
		a.now = r.Now
	}
	k := a.keys[r.Key]
	if k == nil {
		if len(a.keys) >= maxMemoryKeys {
			a.sweep()
		}
		if len(a.keys) >= maxMemoryKeys {
			return Grant{}, fmt.Errorf("%w: %d keys", ErrAuthorityFull, len(a.keys))
		}
		k = &memoryKey{hs: make(map[string]Holding), ended: a.evicted}
	}
	k.kind, k.period, k.refill = r.Kind, r.Limit.Period, Refill(r.Limit)
	a.forget(k, r.Window)
	hs := k.hs
	_, found := hs[r.Holder]
	if !found && len(hs) >= MaxHolders {
		return Grant{}, fmt.Errorf("%w: key %q has %d holders", ErrAuthorityFull, r.Key, len(hs))
	}
	others := make([]Holding, 0, len(hs))
	for id, h := range hs {
		if id != r.Holder {
			others = append(others, h)
		}
	}
	g, h := Allocate(r, others)
	if r.Kind == Bucket && !found && len(others) == 0 {
		fresh := k.ended.IsZero() || !a.now.Before(k.ended.Add(k.refill))
		g.Tokens = StartTokens(r.Limit, g.Burst, a.now.Sub(k.ended).Microseconds(), fresh)
	}
	h.Expires = r.Now.Add(r.TTL)
	hs[r.Holder] = h
	a.keys[r.Key] = k
	return g, nil
}

// Release implements Authority.
func (a *MemoryAuthority) Release(ctx context.Context, key, holder string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if k := a.keys[key]; k != nil {
		if h, ok := k.hs[holder]; ok && h.Expires.After(a.now) {
			// Expired now, with no share: forgotten at once but for a
			// window's, which counts what it admitted until its window
			// ends (forget).
			h.Demand, h.Share, h.Burst, h.Expires = 0, 0, 0, a.now
			k.hs[holder] = h
		}
	}
	return nil
}

// Holdings implements Authority: the key's holdings live at the latest
// time the authority has seen, by holder.
func (a *MemoryAuthority) Holdings(ctx context.Context, key string) ([]Holding, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Holding
	if a.keys[key] == nil {
		return nil, nil
	}
	for _, h := range a.keys[key].hs {
		if h.Expires.After(a.now) {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(x, y Holding) int { return cmp.Compare(x.Holder, y.Holder) })
	return out, nil
}

// forget drops the expired holdings of one key. A Window holding is
// kept, and counted as it was, until the window it expired in has ended
// (window is the current one): its holder may have admitted up to its
// allowance there, which another holder must not be given again.
func (a *MemoryAuthority) forget(k *memoryKey, window int64) {
	for id, h := range k.hs {
		if h.Expires.After(a.now) {
			continue
		}
		if k.kind == Window && floorDiv(h.Expires.UnixNano(), int64(k.period)) >= window {
			continue
		}
		delete(k.hs, id)
		k.ended = later(k.ended, h.Expires)
	}
}

// drop deletes a key with no holdings once the end of its last one no
// longer counts (StartTokens).
func (a *MemoryAuthority) drop(key string, k *memoryKey) {
	if len(k.hs) == 0 && (k.kind != Bucket || !a.now.Before(k.ended.Add(k.refill))) {
		delete(a.keys, key)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sweep drops the expired holdings of every key, and the keys left with
// none; a full table is swept at most once per sweepMinimumAge of its
// time, so that a flood of new keys does not make each renewal a scan.
func (a *MemoryAuthority) sweep() {
	if !a.swept.IsZero() && a.now.Sub(a.swept) < sweepMinimumAge {
		return
	}
	a.swept = a.now
	for key, k := range a.keys {
		a.forget(k, floorDiv(a.now.UnixNano(), int64(k.period)))
		a.drop(key, k)
	}
	if len(a.keys) < maxMemoryKeys {
		return
	}
	// Still full: the keys without holdings go before their refill has
	// passed, rather than a flood of one-off keys refusing every new one.
	for key, k := range a.keys {
		if len(k.hs) == 0 {
			a.evicted = later(a.evicted, k.ended)
			delete(a.keys, key)
		}
	}
}
