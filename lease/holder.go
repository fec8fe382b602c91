package lease

import (
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// holder is one key's lease on the holder's side, with time as a
// parameter (Unix nanoseconds): it decides locally on its share, notes
// the demand, says when a renewal is due and applies a grant. It reads no
// clock and starts nothing; the Store locks it and runs its renewals, the
// simulation drives it directly.
type holder struct {
	kind   Kind
	limit  sluice.Limit
	period int64 // limit.Period in ns
	quota  int64 // the rule's quota, which a decision reports as Limit
	renew  int64 // ns between renewals, as configured
	ttl    int64
	// every is the interval to the next renewal: renew, or longer while
	// the key is quiet (stretch); lease the TTL the last request asked
	// for: its interval plus ttl - renew, the interval doubled if the
	// last grant found the key quiet, so that the lease outlasts the
	// interval its grant may set.
	every, lease int64
	quiet        bool

	held      bool  // a grant has been applied
	expires   int64 // the lease's end: the grant's send time + ttl
	share     int64 // units per period
	burst     int64 // a Bucket holder's capacity
	allowance int64 // a Window holder's limit in window grantWin
	grantWin  int64
	holders   int   // as the last grant counted them, for observation
	gen       int64 // counts the leases begun, so that a refund goes to the one charged

	// A Bucket holder's tokens: tok whole units and frac/period of one,
	// at last. tok goes below 0 after a shrinking share is charged back
	// to its send time (apply).
	tok, frac, last int64

	// A Window holder's current window and what it admitted in it.
	win, used int64

	// Demand: units asked since the interval began at since.
	asked, since int64
	begun        bool
	rate         float64 // the demand, smoothed over intervals; -1 before the first
	demand       int64   // as last reported

	sent     int64 // when the last renewal was sent
	inflight bool
	// free says the last grant left part of the quota unasked for (the
	// holders' demand below Rate); starved that the holder has denied a
	// request on its lease since its last renewal. Both make a renewal
	// due early (due).
	free, starved bool
	// A Window holder sending a renewal reports, as used, what it has
	// admitted plus a reserve, its demand over a renewal interval, and
	// admits no more than that (upto) in that window, nor in a later one,
	// until the grant comes: the authority counts what it may admit
	// meanwhile, so an allowance shrinks within a window to no less than
	// that, and a share that shrank is not exceeded by the old one in the
	// next window. uptoWin is the request's window, the one the grant's
	// allowance is for.
	upto, uptoWin int64
}

func newHolder(kind Kind, l sluice.Limit, quota int64, renew, ttl time.Duration) *holder {
	return &holder{kind: kind, limit: l, period: int64(l.Period), quota: quota, renew: int64(renew), ttl: int64(ttl),
		every: int64(renew), lease: int64(ttl), win: math.MinInt64, rate: -1}
}

// maxStretch bounds how far a quiet key's renewal interval stretches, as
// a multiple of Renew and in time.
const (
	maxStretch      = 32
	maxStretchEvery = int64(10 * time.Second)
)

// stretch sets the interval to the next renewal after grant g: doubled,
// up to maxStretch Renews and 10s (never below Renew), while the key is
// quiet: the holders together ask at most half the quota, this holder's
// share is at least one and a half times its demand (a lone holder's is,
// on a quiet key), and it denied nothing since its last renewal; else
// Renew. A quiet key's shares sum to well under the
// quota, so a holder whose demand rises takes from what is free by an
// early renewal (due) without waiting for the others'; what a longer
// interval costs is a share given back later, and a longer TTL.
func (h *holder) stretch(g Grant) {
	quiet := 2*g.Demand <= h.limit.Rate && 2*g.Share >= 3*max(h.demand, 1) && !h.starved
	switch {
	case !quiet:
		h.every = h.renew
	case h.quiet: // the request asked a lease for the longer interval
		h.every = h.lease - (h.ttl - h.renew)
	}
	h.quiet = quiet
}

// leaseFor is the TTL to ask for at the next request (see lease).
func (h *holder) leaseFor() int64 {
	every := h.every
	if h.quiet {
		every = max(min(2*h.every, maxStretch*h.renew, maxStretchEvery), h.renew)
	}
	return every + h.ttl - h.renew
}

// demandWeight is the weight of the last renewal interval in the demand
// a holder reports, the rest being the demand it reported before: one
// interval of a holder that sees a request every few intervals would
// swing its share from nothing to several times its demand.
const demandWeight = 0.5

// live reports whether the holder has a lease at now.
func (h *holder) live(now int64) bool { return h.held && now < h.expires }

// due reports whether a renewal should be sent at now: none is in flight,
// and the holder has no live lease or its last renewal is Renew old; or,
// early, it has denied a request on its share while the last grant left
// quota unasked for, and its last renewal is an eighth of Renew old (at
// least sluice.MinLeaseRenew). A first grant, with no demand measured,
// is half the quota at most; under a long Renew the holder would deny for
// all of it what the key has free. Overloaded, no quota is free and no
// renewal comes early.
func (h *holder) due(now int64) bool {
	if h.inflight {
		return false
	}
	if !h.live(now) || now-h.sent >= h.every {
		return true
	}
	return h.starved && h.free && now-h.sent >= h.earliest()
}

// earliest is the shortest time between a holder's renewals.
func (h *holder) earliest() int64 { return min(max(h.renew/8, int64(sluice.MinLeaseRenew)), h.renew) }

// request is the renewal to send at now. It starts the next demand
// interval and marks a renewal in flight until apply or fail.
func (h *holder) request(now int64, key, id string) Request {
	h.begin(now)
	// The interval is measured, down to the shortest an early renewal
	// comes after (due): a floor of a whole Renew would read an early
	// renewal's demand as a fraction of what it is.
	dt := max(now-h.since, h.earliest())
	rate := math.Min(float64(h.asked)*float64(h.period)/float64(dt), float64(demandCap(h.limit.Rate)))
	switch {
	case h.rate < 0 && h.asked == 0:
		rate = 0 // the first request: no interval measured yet
	case h.rate < 0:
		h.rate = rate
	default:
		h.rate += (rate - h.rate) * demandWeight
		rate = h.rate
	}
	d := int64(math.Round(rate))
	h.asked, h.since, h.demand = 0, now, d
	h.sent, h.inflight = now, true
	h.lease = h.leaseFor()
	r := Request{Key: key, Holder: id, Kind: h.kind, Limit: h.limit, Demand: d, TTL: time.Duration(h.lease), Now: time.Unix(0, now)}
	if h.kind == Window {
		h.roll(now)
		reserve := int64(math.Ceil(max(rate, 0) * float64(h.renew) / float64(h.period)))
		r.Window, r.Used = h.win, h.used+min(reserve, max(h.windowLimit()-h.used, 0))
		h.upto, h.uptoWin = r.Used, h.win
	}
	return r
}

// begin starts the first demand interval at the holder's first request.
func (h *holder) begin(now int64) {
	if !h.begun {
		h.begun, h.since = true, now
	}
}

// fail ends a renewal that failed: the lease holds until it expires.
func (h *holder) fail() { h.inflight = false }

// apply takes the grant of the renewal sent at sent, at now. A new lease
// starts with the grant's Tokens (none unless the key was idle); a share that shrank is charged from sent, when
// the authority may already have given the difference to another holder,
// and one that grew counts from now; tokens above a smaller burst go.
func (h *holder) apply(g Grant, sent, now int64) {
	// The allowance is for the window the request reported, which the
	// authority counted, not the window of its send time: the request's
	// window comes from the latest time the holder saw.
	win := floorDiv(sent, h.period)
	if h.inflight && h.kind == Window {
		win = h.uptoWin
	}
	h.inflight = false
	now = max(now, sent)
	if h.kind == Bucket {
		// A renewal sent while the lease was live continues it, however
		// late its grant is applied: the authority kept the holding.
		if h.live(sent) {
			h.fill(now)
			if g.Share < h.share && now > sent {
				h.take(mulDivCeil(h.share-g.Share, now-sent, h.period))
			}
		} else {
			h.tok, h.frac, h.last = max(g.Tokens, 0), 0, now
			h.gen++
		}
		if h.tok >= g.Burst {
			h.tok, h.frac = g.Burst, 0
		}
	}
	h.held, h.expires = true, sent+h.lease
	h.share, h.burst, h.holders = g.Share, g.Burst, g.Holders
	h.free = g.Demand < h.limit.Rate
	h.stretch(g)
	h.starved = false
	h.allowance, h.grantWin = g.Allowance, win
}

// charge is what a decision charged: a Bucket holder's lease (gen), a
// Window holder's window, so that a refund gives back to that only.
type charge struct{ gen, win int64 }

// decide decides n units at now on the lease, charging them if allowed,
// and returns what it charged against, for refund. The caller has checked
// that the lease is live.
func (h *holder) decide(now, n int64, d *sluice.Decision) charge {
	h.begin(now)
	h.asked += n
	*d = sluice.Decision{Limit: h.quota}
	if h.kind == Bucket {
		h.fill(now)
		if d.Allowed = n == 0 || h.tok >= n; d.Allowed {
			h.tok -= n
		}
		d.Remaining = max(h.tok, 0)
		if !d.Allowed {
			d.RetryAfter = h.wait(n)
			h.starved = h.starved || n <= h.limit.Capacity()
		}
		d.ResetAfter = h.wait(h.burst)
		return charge{gen: h.gen}
	}
	h.roll(now)
	limit := h.windowLimit()
	if h.inflight && h.uptoWin <= h.win {
		limit = min(limit, h.upto)
	}
	if d.Allowed = n == 0 || h.used+n <= limit; d.Allowed {
		h.used += n
	}
	d.Remaining = max(limit-h.used, 0)
	end := time.Duration((h.win+1)*h.period - h.last)
	if !d.Allowed {
		d.RetryAfter = end
		if n > h.limit.Rate {
			d.RetryAfter = sluice.Never
		} else {
			h.starved = true
		}
	}
	if h.used > 0 {
		d.ResetAfter = end
	}
	return charge{win: h.win}
}

// refund gives back n units the holder charged at now, against c, for a
// request that was denied elsewhere: only to the lease or the window it
// charged, since units given back to another would be units the
// authority never granted.
func (h *holder) refund(now, n int64, c charge) {
	if h.kind == Bucket {
		if c.gen != h.gen {
			return
		}
		h.fill(now)
		h.tok = min(h.tok+n, h.burst)
		return
	}
	if c.win == h.win && h.used >= n {
		h.used -= n
	}
}

// windowLimit is what a Window holder may admit in its current window:
// the allowance of a grant for that window, else its share.
func (h *holder) windowLimit() int64 {
	if h.grantWin == h.win {
		return h.allowance
	}
	return h.share
}

// roll moves a Window holder to the window of now; a time earlier than
// the latest seen is read as the latest.
func (h *holder) roll(now int64) {
	now = max(now, h.last)
	h.last = now
	if w := floorDiv(now, h.period); w > h.win {
		h.win, h.used = w, 0
	}
}

// fill refills a Bucket holder's tokens from last to now at its share, up
// to its burst; a time earlier than last is read as last.
func (h *holder) fill(now int64) {
	if now <= h.last {
		return
	}
	dt := now - h.last
	h.last = now
	if h.tok >= h.burst || h.share <= 0 {
		h.tok, h.frac = min(h.tok, h.burst), 0
		return
	}
	hi, lo := bits.Mul64(uint64(h.share), uint64(dt))
	lo, c := bits.Add64(lo, uint64(h.frac), 0)
	hi += c
	if hi >= uint64(h.period) {
		h.tok, h.frac = h.burst, 0
		return
	}
	q, r := bits.Div64(hi, lo, uint64(h.period))
	if q >= uint64(h.burst-h.tok) {
		h.tok, h.frac = h.burst, 0
		return
	}
	h.tok += int64(q)
	h.frac = int64(r)
}

// take charges a Bucket holder n units, below empty if need be.
func (h *holder) take(n int64) { h.tok -= n }

// wait is how long until a Bucket holder has n tokens at its share, if
// nothing else comes: Never when the rule's capacity cannot hold them,
// and a renewal interval, the soonest its share can change, when its
// burst cannot or its share is zero.
func (h *holder) wait(n int64) time.Duration {
	if n <= h.tok {
		return 0
	}
	if n > h.limit.Capacity() {
		return sluice.Never
	}
	if n > h.burst || h.share <= 0 {
		return time.Duration(h.renew)
	}
	// need = (n - tok)·period - frac, in units·ns; wait = ceil(need/share).
	hi, lo := bits.Mul64(uint64(n-h.tok), uint64(h.period))
	lo, b := bits.Sub64(lo, uint64(h.frac), 0)
	hi -= b
	if hi >= uint64(h.share) {
		return sluice.Never
	}
	q, r := bits.Div64(hi, lo, uint64(h.share))
	if r > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return sluice.Never
	}
	return time.Duration(q)
}

// mulDivCeil is ceil(a·b/c) for a, b >= 0 and c > 0, capped at MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r > 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

// floorDiv is a/b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
