package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Requests across slots. On a Cluster a script run's keys must sit on one
// master (share a slot, through the cluster client; on a Ring, a tag),
// while the checks of one request, per IP and per user, hash where their
// keys do; and a Pair's two stores are two Redis. Such a request is
// decided in parts, one per master (slot, tag, store), by a protocol that
// keeps it all-or-nothing once it completes:
//
//  1. Every part is taken at once, each in a run of its own on its node
//     (flavour 1 in take.lua): all-or-nothing within the part, and with a
//     receipt per check, the time it was decided at and a bucket's debt
//     after.
//  2. If every part passes, the request is allowed and charged.
//  3. If any part denies, or fails, each part that was charged is given
//     back (flavour 2), on its node, with its receipts: its gate checks'
//     charges, never a usage check's, which is recorded whatever the
//     request's fate (sluice.ChargeUsage). The charge comes off what the
//     check's state holds of it, never more, so a give-back mints nothing
//     (see giveback in take.lua). Its gate checks then report the peek a
//     denied request reports.
//
// Between a part's take and its give-back, one round trip to the slowest
// node and one back, a concurrent request on a charged key sees the
// charge and may be denied for it: that is the window in which the
// interim state shows. A request that fails (a node timed out) gives back
// what it charged elsewhere and returns the error; the part that timed out
// may have run all the same, and its charge stays, as any Take's whose
// answer was lost. A give-back carries a token, a key of its own for ten
// seconds, so that sending it twice gives back once: a client's retry
// after a lost answer cannot mint, and the store sends a give-back that
// failed once more. One that fails twice leaves its part's charge in
// place until the state's window or refill ends it; it is counted in
// Stats.GiveBackErrors and its error is returned. A request on more than
// maxParts parts is refused. The parts beyond the first, and the
// give-backs, are sent each from a goroutine of its own.

// maxParts bounds the parts of one request, each a script run at once: a
// request on more masters, or more slots (WithoutBatching, or a Ring's
// tags), is refused with ErrCrossSlot.
const maxParts = 64

// Run modes of a part: take.lua's flavour, in the head of its ARGV[1].
const (
	modeTake = 1 // take, with receipts
	modeGive = 2 // give back a take
)

// errMoved is the error of a request a Cluster node could not decide: a
// slot of its keys had moved to another node. Nothing was charged.
var errMoved = errors.New("redis: a key's slot moved")

// part is the checks of a split request that one run can decide.
type part struct {
	s     *Store // the store that decides it
	l     *link  // where its runs go
	p     *pending
	idx   []int // the request's check index of each of p's checks
	reply []int64
	err   error
	// back is its give-back, if it was charged, with its take's receipts
	// (give).
	back *pending
	give giving
}

// split decides a request in parts, each on its node (see parts and
// cluster.decide). It returns errMoved, having given back what the others
// charged, when a part's node no longer held one of its keys.
func (s *Store) split(ctx context.Context, parts []*part, out []sluice.Decision) error {
	defer func() {
		for _, pt := range parts {
			pt.p.release()
			if pt.back != nil {
				pt.back.release()
			}
		}
	}()
	if len(parts) > maxParts {
		return fmt.Errorf("%w: %d parts, at most %d", ErrCrossSlot, len(parts), maxParts)
	}
	s.st.splits.Add(1)
	var wg sync.WaitGroup // one for the takes and the give-backs
	takeParts(ctx, &wg, parts)
	passed, err := outcome(parts)
	if err == nil && passed {
		for _, pt := range parts {
			pt.decode(pt.reply, 8, out)
		}
		return nil
	}
	// Give back every part that charged: even for a caller that gave up,
	// under the store's own deadline.
	if backErr := giveBack(context.WithoutCancel(ctx), &wg, parts); err == nil {
		err = backErr
	}
	if err != nil {
		return err
	}
	for _, pt := range parts {
		pt.decode(pt.reply, 8, out)
		if pt.back != nil {
			// the checks given back report their peek
			for i, a := range pt.back.args {
				if a.cost > 0 {
					pt.back.decodeOne(i, pt.back.reply[6*i:6*i+6], &out[pt.idx[i]])
				}
			}
		}
	}
	return nil
}

// takeParts takes every part at once: the first in this goroutine, the
// others each in one of its own.
func takeParts(ctx context.Context, wg *sync.WaitGroup, parts []*part) {
	for _, pt := range parts[1:] {
		wg.Go(func() { pt.reply, pt.err = pt.l.in.send(ctx, taking{}, pt.p) })
	}
	parts[0].reply, parts[0].err = parts[0].l.in.send(ctx, taking{}, parts[0].p)
	wg.Wait()
}

// outcome reports whether every part passed, and the parts' error: an
// error of Redis's before a moved slot, which the caller would redo.
func outcome(parts []*part) (passed bool, err error) {
	passed = true
	for _, pt := range parts {
		switch {
		case pt.err != nil:
			if err == nil || err == errMoved {
				err = pt.err
			}
		case !pt.passed():
			passed = false
		}
	}
	return passed, err
}

// giveBack gives back every part that passed and charged, at once, each
// twice at most: its token makes a second send safe. It returns the
// first give-back's error, counted.
func giveBack(ctx context.Context, wg *sync.WaitGroup, parts []*part) error {
	for _, pt := range parts {
		if pt.err != nil || !pt.passed() || !pt.charged() {
			continue
		}
		pt.back = pt.giveBack()
		pt.give.taken = pt.reply
		wg.Go(func() {
			pt.s.st.giveBacks.Add(1)
			var err error
			for range 2 {
				var reply []int64
				reply, err = pt.l.giveBack(ctx, &pt.give, pt.back)
				if err == nil {
					pt.back.reply = reply
					return
				}
				if err == errMoved {
					break
				}
			}
			pt.err = fmt.Errorf("redis: giving back a part of a request denied across slots: %w", err)
		})
	}
	wg.Wait()
	var backErr error
	for _, pt := range parts {
		if pt.back != nil && pt.err != nil {
			pt.s.st.errors.Add(1)
			pt.s.st.giveBackErrors.Add(1)
			if backErr == nil {
				backErr = pt.err
			}
		}
	}
	return backErr
}

// parts splits p's checks into parts of store s by id, in the order they
// first appear; to is the link of each check.
func parts[K comparable](s *Store, p *pending, id func(i int) K, to func(i int) *link) []*part {
	var parts []*part
	var ids []K
	for i, a := range p.args {
		k := id(i)
		var pt *part
		for j, q := range parts {
			if ids[j] == k {
				pt = q
				break
			}
		}
		if pt == nil {
			pt = &part{s: s, l: to(i), p: newPending(p.now)}
			parts = append(parts, pt)
			ids = append(ids, k)
		}
		pt.p.args = append(pt.p.args, a)
		pt.p.keys = append(pt.p.keys, p.keys[i])
		pt.idx = append(pt.idx, i)
	}
	return parts
}

// passed reports whether the part's take passed: every check not in
// shadow mode allowed, so that it charged its checks that allowed.
func (pt *part) passed() bool {
	for i, a := range pt.p.args {
		if pt.reply[8*i] != 1 && !a.shadow {
			return false
		}
	}
	return true
}

// charged reports whether the part's take, which passed, charged a check
// that a give-back would give back: a gate check's. Usage is recorded
// whatever the other parts decide.
func (pt *part) charged() bool {
	for i, a := range pt.p.args {
		if pt.reply[8*i] == 1 && a.cost > 0 && a.p.charge == algo.ChargeGate {
			return true
		}
	}
	return false
}

// giveBack is the request that gives back what the part's take charged:
// each check at the cost it was charged, 0 if none, with its receipt, and
// a token of its own, a key in its first check's slot, which makes it
// once only however often it is sent (see giveback in take.lua).
func (pt *part) giveBack() *pending {
	g := newPending(pt.p.now)
	g.keys = append(g.keys, pt.p.keys...)
	g.keys = append(g.keys, pt.s.keys.prefix+"{"+tagOf(pt.p.keys[0])+"}:give:"+strconv.FormatUint(rand.Uint64(), 36))
	for i, a := range pt.p.args {
		if pt.reply[8*i] != 1 || a.p.charge != algo.ChargeGate {
			a.cost = 0
		}
		g.args = append(g.args, a)
	}
	return g
}

// decode writes the part's decisions from reply, stride numbers a check,
// to the request's out.
func (pt *part) decode(reply []int64, stride int, out []sluice.Decision) {
	for i := range pt.p.args {
		pt.p.decodeOne(i, reply[stride*i:stride*i+6], &out[pt.idx[i]])
	}
}
