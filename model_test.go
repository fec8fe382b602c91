package sluice

import (
	"math/big"
	"time"
)

// The reference models below restate each algorithm the plainest way, in
// exact rational arithmetic (math/big), with none of the implementation's
// tricks: no ticks, no 128-bit products, no ring buffer. The property tests
// hold the limiters to them decision for decision. Times are Unix ns and
// never go back in the traces the models are given.

// model is a reference implementation of one algorithm.
type model interface {
	allowN(now, n int64) Decision
}

func newModel(k kind, l Limit) model {
	switch k {
	case bucketKind:
		return newTokenModel(l)
	case fixedKind:
		return &fixedModel{rate: l.Rate, period: int64(l.Period), counts: map[int64]int64{}}
	case logKind:
		return &logModel{rate: l.Rate, period: int64(l.Period)}
	default:
		return &counterModel{rate: l.Rate, period: int64(l.Period), counts: map[int64]int64{}}
	}
}

func ratInt(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// ceilNs is ⌈r⌉ nanoseconds, saturated at Never.
func ceilNs(r *big.Rat) time.Duration {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() == int64(Never) {
		if q.Sign() < 0 {
			panic("ceilNs of a negative duration")
		}
		return Never
	}
	return time.Duration(q.Int64())
}

// floorInt is ⌊r⌋.
func floorInt(r *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q
}

// tokenModel is the textbook token bucket: tokens and the time of the last
// refill; refill min(B, tokens + dt·Rate/Period), then take.
type tokenModel struct {
	rate, period, burst int64
	tokens              *big.Rat
	last                int64
	started             bool
}

func newTokenModel(l Limit) *tokenModel {
	return &tokenModel{rate: l.Rate, period: int64(l.Period), burst: l.Capacity(), tokens: ratInt(l.Capacity())}
}

// perUnit is the time one token takes to come back, Period/Rate ns.
func (m *tokenModel) perUnit() *big.Rat { return big.NewRat(m.period, m.rate) }

func (m *tokenModel) allowN(now, n int64) Decision {
	if m.started && now > m.last {
		dt := new(big.Rat).Mul(ratInt(now-m.last), big.NewRat(m.rate, m.period))
		m.tokens.Add(m.tokens, dt)
		if m.tokens.Cmp(ratInt(m.burst)) > 0 {
			m.tokens = ratInt(m.burst)
		}
	}
	m.last, m.started = now, true
	d := Decision{Limit: m.burst}
	switch {
	case n < 0 || n > m.burst:
		d.RetryAfter = Never
	case m.tokens.Cmp(ratInt(n)) >= 0:
		d.Allowed = true
		m.tokens.Sub(m.tokens, ratInt(n))
	case m.rate == 0:
		d.RetryAfter = Never
	default:
		short := new(big.Rat).Sub(ratInt(n), m.tokens)
		d.RetryAfter = ceilNs(short.Mul(short, m.perUnit()))
	}
	d.Remaining = floorInt(m.tokens).Int64()
	if missing := new(big.Rat).Sub(ratInt(m.burst), m.tokens); missing.Sign() > 0 {
		if m.rate == 0 {
			d.ResetAfter = Never
		} else {
			d.ResetAfter = ceilNs(missing.Mul(missing, m.perUnit()))
		}
	}
	return d
}

// releaseAfter is when a request queued now would leave a leaky queue: once
// the tokens missing before it have come back.
// With no refill (Rate 0), the whole burst leaves at once, as the tokens
// of a bucket that is never refilled are all there at once.
func (m *tokenModel) releaseAfter() time.Duration {
	missing := new(big.Rat).Sub(ratInt(m.burst), m.tokens)
	if missing.Sign() <= 0 || m.rate == 0 {
		return 0
	}
	return ceilNs(missing.Mul(missing, m.perUnit()))
}

// leakyModel is the textbook leaky bucket as a meter: water and the time of
// the last leak; leak max(0, water - dt·Rate/Period), then pour if it fits.
type leakyModel struct {
	rate, period, capacity int64
	water                  *big.Rat
	last                   int64
	started                bool
}

func newLeakyModel(l Limit) *leakyModel {
	return &leakyModel{rate: l.Rate, period: int64(l.Period), capacity: l.Capacity(), water: new(big.Rat)}
}

func (m *leakyModel) allowN(now, n int64) Decision {
	if m.started && now > m.last {
		m.water.Sub(m.water, new(big.Rat).Mul(ratInt(now-m.last), big.NewRat(m.rate, m.period)))
		if m.water.Sign() < 0 {
			m.water.SetInt64(0)
		}
	}
	m.last, m.started = now, true
	d := Decision{Limit: m.capacity}
	level := new(big.Rat).Add(m.water, ratInt(n))
	switch {
	case n < 0 || n > m.capacity:
		d.RetryAfter = Never
	case level.Cmp(ratInt(m.capacity)) <= 0:
		d.Allowed = true
		m.water = level
	case m.rate == 0:
		d.RetryAfter = Never
	default:
		over := level.Sub(level, ratInt(m.capacity))
		d.RetryAfter = ceilNs(over.Mul(over, big.NewRat(m.period, m.rate)))
	}
	d.Remaining = floorInt(new(big.Rat).Sub(ratInt(m.capacity), m.water)).Int64()
	if m.water.Sign() > 0 {
		if m.rate == 0 {
			d.ResetAfter = Never
		} else {
			d.ResetAfter = ceilNs(new(big.Rat).Mul(m.water, big.NewRat(m.period, m.rate)))
		}
	}
	return d
}

// window returns the index of the aligned window [k·p, (k+1)·p) holding
// now, and how far into it now is, computed in big integers so that no
// time overflows.
func window(now, p int64) (k, elapsed int64) {
	q, m := new(big.Int).DivMod(big.NewInt(now), big.NewInt(p), new(big.Int))
	return q.Int64(), m.Int64()
}

// durationSum is the sum of non-negative nanoseconds, saturated at Never.
func durationSum(ns ...int64) time.Duration {
	s := new(big.Int)
	for _, n := range ns {
		s.Add(s, big.NewInt(n))
	}
	if !s.IsInt64() {
		return Never
	}
	return time.Duration(s.Int64())
}

// fixedModel counts units per aligned window in a map.
type fixedModel struct {
	rate, period int64
	counts       map[int64]int64
}

func (m *fixedModel) allowN(now, n int64) Decision {
	k, elapsed := window(now, m.period)
	end := time.Duration(m.period - elapsed)
	d := Decision{Limit: m.rate}
	switch {
	case n < 0 || n > m.rate:
		d.RetryAfter = Never
	case n <= m.rate-m.counts[k]:
		d.Allowed = true
		m.counts[k] += n
	default:
		d.RetryAfter = end
	}
	d.Remaining = m.rate - m.counts[k]
	if m.counts[k] > 0 {
		d.ResetAfter = end
	}
	return d
}

// logModel keeps every allowed request in a plain slice.
type logModel struct {
	rate, period int64
	log          []logEntry
}

type logEntry struct{ at, n int64 }

func (m *logModel) allowN(now, n int64) Decision {
	var live []logEntry
	var count int64
	for _, e := range m.log {
		age := new(big.Int).Sub(big.NewInt(now), big.NewInt(e.at))
		if age.Cmp(big.NewInt(m.period)) < 0 { // the window is (now-Period, now]
			live = append(live, e)
			count += e.n
		}
	}
	m.log = live
	d := Decision{Limit: m.rate}
	switch {
	case n < 0 || n > m.rate:
		d.RetryAfter = Never
	case n <= m.rate-count:
		d.Allowed = true
		if n > 0 {
			m.log = append(m.log, logEntry{now, n})
			count += n
		}
	default:
		left := count
		for _, e := range m.log {
			left -= e.n
			if left <= m.rate-n {
				d.RetryAfter = durationSum(e.at, m.period, -now)
				break
			}
		}
	}
	d.Remaining = m.rate - count
	if len(m.log) > 0 {
		d.ResetAfter = durationSum(m.log[len(m.log)-1].at, m.period, -now)
	}
	return d
}

// counterModel is the sliding window counter's formula over per-window
// counts: estimate = prev·(Period-elapsed)/Period + curr, allowed iff
// estimate + n - 1 < Rate.
type counterModel struct {
	rate, period int64
	counts       map[int64]int64
}

func (m *counterModel) estimate(prev, curr, elapsed int64) *big.Rat {
	e := new(big.Rat).Mul(ratInt(prev), big.NewRat(m.period-elapsed, m.period))
	return e.Add(e, ratInt(curr))
}

func (m *counterModel) fits(prev, curr, elapsed, n int64) bool {
	e := m.estimate(prev, curr, elapsed)
	e.Add(e, ratInt(n-1))
	return e.Cmp(ratInt(m.rate)) < 0
}

// firstFit is the least offset into a window whose previous window held
// prev and which holds curr at which n more units fit, or -1: solve
// prev·(P-off)/P + curr + n - 1 < Rate for the integer off.
func (m *counterModel) firstFit(prev, curr, n int64) int64 {
	room := m.rate - curr - n + 1
	switch {
	case room <= 0:
		return -1
	case prev == 0:
		return 0
	}
	// off > P - room·P/prev
	bound := new(big.Rat).Sub(ratInt(m.period), new(big.Rat).Mul(ratInt(room), big.NewRat(m.period, prev)))
	off := floorInt(bound).Int64() + 1
	switch {
	case off < 0:
		return 0
	case off >= m.period:
		return -1
	}
	return off
}

func (m *counterModel) allowN(now, n int64) Decision {
	k, elapsed := window(now, m.period)
	prev, curr := m.counts[k-1], m.counts[k]
	d := Decision{Limit: m.rate}
	switch {
	case n < 0 || n > m.rate:
		d.RetryAfter = Never
	case m.fits(prev, curr, elapsed, n):
		d.Allowed = true
		curr += n
		m.counts[k] = curr
	default:
		if off := m.firstFit(prev, curr, n); off >= 0 {
			if off <= elapsed {
				panic("counterModel: a denied request fits now")
			}
			d.RetryAfter = time.Duration(off - elapsed)
		} else if off := m.firstFit(curr, 0, n); off >= 0 {
			d.RetryAfter = durationSum(m.period, -elapsed, off)
		} else {
			d.RetryAfter = durationSum(m.period, -elapsed, m.period)
		}
	}
	left := new(big.Rat).Sub(ratInt(m.rate), m.estimate(prev, curr, elapsed))
	if left.Sign() > 0 {
		d.Remaining = ceilNs(left).Nanoseconds()
	}
	switch {
	case curr > 0:
		d.ResetAfter = durationSum(m.period, -elapsed, m.period)
	case prev > 0:
		d.ResetAfter = time.Duration(m.period - elapsed)
	}
	return d
}
