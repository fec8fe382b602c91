package lease

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// Kind is how a holder decides locally on its share, and so how its share
// is counted: per fixed window, or as a bucket's refill.
type Kind uint8

const (
	// Bucket is the token bucket, the leaky bucket (meter) and GCRA: a
	// share is a part of the refill rate and of the capacity.
	Bucket Kind = iota + 1
	// Window is the fixed window: a share is a part of each window's
	// Rate, and within the current window an allowance the holder may
	// not exceed (see Grant.Allowance).
	Window
)

// String returns "bucket" or "window".
func (k Kind) String() string {
	switch k {
	case Bucket:
		return "bucket"
	case Window:
		return "window"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Authority is the shared side of leasing: it keeps, per key, each
// holder's demand and share, and divides the key's quota among the
// holders in proportion to their demand (Allocate). The memory authority
// serves the processes of one address space, the Redis one those sharing
// a Redis.
type Authority interface {
	// Renew reports a holder's demand on a key and returns its share,
	// good for r.TTL from when the request was sent. The holders whose
	// shares have expired are forgotten first, so that their shares
	// come back.
	Renew(ctx context.Context, r Request) (Grant, error)
	// Release forgets a holder's share of a key at once; a Window
	// holder's allowance is still counted until its window ends, as
	// what it admitted there must not be given to another.
	Release(ctx context.Context, key, holder string) error
	// Holdings lists the live holdings of a key, for observation.
	Holdings(ctx context.Context, key string) ([]Holding, error)
}

// Batcher is an Authority that renews several keys in one call, as the
// Redis authority does on a single Redis: one script run for many
// renewals costs the shared store far less than one run each. A Store
// whose authority is a Batcher sends its routine renewals together (see
// Store).
type Batcher interface {
	Authority
	// RenewBatch renews each of rs as Renew would, setting gs[i] or
	// errs[i] (gs and errs as long as rs). An error of the call, such as
	// a timeout, is each request's.
	RenewBatch(ctx context.Context, rs []Request, gs []Grant, errs []error)
}

// Request is a holder's renewal of its share of a key.
type Request struct {
	Key    string
	Holder string // one process, or one stream of a quota service
	Kind   Kind
	Limit  sluice.Limit
	// Demand is the units asked of the holder (allowed or not) per
	// Period, over its last renewal interval.
	Demand int64
	// Window and Used are a Window holder's current window index
	// (its time / Period) and the units it admitted in that window.
	Window int64
	Used   int64
	// TTL is how long the share holds without a renewal.
	TTL time.Duration
	// Now is the holder's time. The memory authority keeps time by it;
	// an authority with a clock of its own (Redis TIME) uses that.
	Now time.Time
}

// Grant is a holder's share of a key until its next renewal.
type Grant struct {
	// Share is the units per Period the holder may admit: its part of
	// Rate. Burst is its part of the bucket's capacity (Limit.Capacity).
	Share int64
	Burst int64
	// Allowance is, for a Window holder, the units it may admit in total
	// in Request.Window, at least Request.Used: in later windows, Share.
	Allowance int64
	// Tokens is, for a Bucket holder's first grant on a key no other
	// holder holds, what the key's bucket has refilled since its last
	// holding ended (StartTokens): its lease starts with them instead of
	// none. Else 0.
	Tokens int64
	// Holders and Demand are the key's live holders and their total
	// demand after this renewal, for observation.
	Holders int
	Demand  int64
}

// Holding is one holder's standing with a key, as an authority keeps it.
type Holding struct {
	Holder    string
	Demand    int64
	Share     int64
	Burst     int64
	Window    int64
	Allowance int64
	// Expires is when the share lapses without a renewal, in the
	// authority's time.
	Expires time.Time
}

// Allocate is the allocation every authority computes, the Redis one in
// Lua with the same float64 operations: the grant to the holder renewing
// with r, given the other live holders of the key (others, expired ones
// already forgotten), and the holding to keep for it (Expires unset).
//
// With C = Rate, D the holders' total demand and n the live holders, the
// renewing holder's target is its demand plus an equal part of the unused
// quota when the demand fits: on a quiet key (D <= C/2) a part is left
// free for a newcomer (d + floor((C-D)/(n+1))), since its holders renew
// seldom (see Renew's stretch in package lease's doc); on a busier one,
// whose holders renew every Renew, none is (d + floor((C-D)/n)), so that
// a holder near the limit is not held to its mean demand plus half the
// headroom. Past the limit (D > C) it is the proportional part,
// floor(C·d/D). Its share is the target less what the others hold, so
// that the shares never sum past C: a holder whose target fell gives back
// at its own renewal, and the others take it at theirs. A Window holder's
// allowance for its current window is the same against what the others
// may still admit in that window, and never less than what it has used.
func Allocate(r Request, others []Holding) (Grant, Holding) {
	c := max(r.Limit.Rate, 0)
	d := min(max(r.Demand, 0), demandCap(c))
	total, held, committed := d, int64(0), int64(0)
	for _, o := range others {
		total += o.Demand
		held += o.Share
		if r.Kind == Window && o.Window == r.Window {
			committed += o.Allowance
		} else {
			committed += o.Share
		}
	}
	n := int64(len(others)) + 1
	var target int64
	if total <= c {
		k := n
		if 2*total <= c {
			k = n + 1
		}
		target = d + (c-total)/k
	} else {
		target = int64(math.Floor(float64(c) * float64(d) / float64(total)))
	}
	share := max(min(target, c-held), 0)
	g := Grant{Share: share, Holders: int(n), Demand: total}
	if c > 0 {
		g.Burst = int64(math.Floor(float64(r.Limit.Capacity()) * float64(share) / float64(c)))
	}
	if r.Kind == Window {
		g.Allowance = max(min(target, c-committed), r.Used, 0)
	}
	h := Holding{Holder: r.Holder, Demand: d, Share: g.Share, Burst: g.Burst, Window: r.Window, Allowance: g.Allowance}
	return g, h
}

// StartTokens is Grant.Tokens for a holder new to a Bucket key that no
// other holder holds, granted burst: what the key's bucket has refilled
// since its last holding ended, idle µs ago, up to burst; all of burst
// when fresh, no holding of the key having ended within the time the
// bucket takes to refill (Refill). No holder admitted anything since, so
// the key's exact bucket holds at least that much: the lease starts with
// it and the bound holds, where an empty start would deny each request of
// a key asked less often than the TTL. The Redis authority computes the
// same in Lua, in the same float64 operations.
func StartTokens(l sluice.Limit, burst, idle int64, fresh bool) int64 {
	if fresh || burst <= 0 {
		return max(burst, 0)
	}
	per := float64(l.Period) / 1e3
	if l.Rate <= 0 || idle <= 0 || per <= 0 {
		return 0
	}
	return min(burst, int64(math.Floor(float64(l.Rate)*float64(idle)/per)))
}

// Refill is how long a key's bucket takes to refill from empty at l,
// which an authority keeps a key's last end of a holding for
// (StartTokens); at most a week.
func Refill(l sluice.Limit) time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return time.Duration(min(float64(l.Period)*float64(l.Capacity())/float64(l.Rate), float64(MaxTTL)))
}

// demandCap bounds a reported demand at four times the quota: more asks
// for no larger a share, and the products above stay exact in float64
// for quotas up to 2^25.
func demandCap(c int64) int64 { return 4*c + 4 }
