package redis

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
)

// WithStoreClock decides at the caller's time, as WithCallerTime, but
// under the store's clock, as at Redis TIME: no decision at a time before
// the latest the store has seen, and a fixed window as a counter per
// window. Tests use it to hold that path to the algorithms at times they
// choose.
func WithStoreClock() Option {
	return func(o *options) error { o.callerTime, o.storeClock = true, true; return nil }
}

// TakeThenGiveBack takes checks at t1 as one part of a request split
// across slots (with receipts), writing the take's decisions to taken,
// and, if it charged, gives it back at t2, writing the peeks the
// give-back reports to back; between, if not nil, is called in between.
// The give-back is sent sends times, as a client's retries would. s must
// decide at the caller's time and not batch.
func TakeThenGiveBack(ctx context.Context, s *Store, t1, t2 time.Time, checks []sluice.Check, between func(), sends int, taken, back []sluice.Decision) (charged bool, err error) {
	if !s.callerTime || s.main.batch != nil {
		return false, errors.New("TakeThenGiveBack: the store must have WithCallerTime and WithoutBatching")
	}
	p, err := s.request(t1, checks)
	if err != nil {
		return false, err
	}
	defer p.release()
	reply, err := s.main.in.send(ctx, taking{}, p)
	if err != nil {
		return false, err
	}
	pt := &part{s: s, l: s.main, p: p, idx: make([]int, len(checks)), reply: reply}
	for i := range pt.idx {
		pt.idx[i] = i
	}
	pt.decode(reply, 8, taken)
	if !pt.passed() || !pt.charged() {
		return false, nil
	}
	if between != nil {
		between()
	}
	g, give := pt.giveBack(), &giving{taken: pt.reply}
	defer g.release()
	g.now = float64(t2.UnixMicro())
	for range sends {
		if reply, err = s.main.giveBack(ctx, give, g); err != nil {
			return true, err
		}
	}
	g.decode(reply, back)
	return true, nil
}

// Resolution is the quantum of time the script decides a bucket rule at
// when it is coarser than a µs (a bucket too long for units of a µs), or
// 0: a rule decided as its algorithm decides, a rule the script cannot
// hold, or no bucket.
func Resolution(r *sluice.PreparedRule) time.Duration {
	res, err := (*Store)(nil).Resolution(r)
	if err != nil || res == time.Microsecond {
		return 0
	}
	return res
}
