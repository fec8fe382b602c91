package sluice

import (
	"math"
	"math/big"
	"time"
)

// The reference models below restate each algorithm the plainest way, in
// exact rational arithmetic (math/big), with none of the implementation's
// tricks: no ticks, no 128-bit products, no ring buffer. The property tests
// hold the limiters to them decision for decision. Times are Unix ns and
// never go back in the traces the models are given.
//
// Each model also knows the two ways to charge usage (ChargeUsage,
// ChargeCount), as Rule.Charge documents them: a check of cost n > 0 is
// allowed iff it fits, as a gate check is, and recorded whether it fits or
// not, into debt capped at one more capacity (a bucket's tokens never
// below -Burst, a window's count or a log's units never above 2·Rate); a
// check of cost 0 records nothing and is allowed iff a unit is left
// (usage) or the limit is not in debt (count). A Rate of 0 records only
// what fits.

// model is a reference implementation of one algorithm.
type model interface {
	allowN(now, n int64) Decision
}

func newModel(k kind, l Limit) model { return newChargedModel(k, l, ChargeGate) }

// newChargedModel is the model of kind k for limit l, charged by c.
func newChargedModel(k kind, l Limit, c Charge) model {
	switch k {
	case bucketKind:
		m := newTokenModel(l)
		m.charge = c
		return m
	case fixedKind:
		return &fixedModel{rate: l.Rate, period: int64(l.Period), charge: c, counts: map[int64]int64{}}
	case logKind:
		return &logModel{rate: l.Rate, period: int64(l.Period), charge: c}
	default:
		return &counterModel{rate: l.Rate, period: int64(l.Period), charge: c, counts: map[int64]int64{}}
	}
}

// need is the units a check of cost n must fit: n, or one for a usage
// rule's check of cost 0.
func need(c Charge, n int64) int64 {
	if n == 0 && c == ChargeUsage {
		return 1
	}
	return n
}

// recorded reports whether a check of cost n that does not fit is
// recorded all the same.
func recorded(c Charge, n, rate int64) bool { return c != ChargeGate && n > 0 && rate > 0 }

// fitsZero reports whether a check of cost 0 is allowed with left units
// left: always for a gate rule, with a unit left for usage, out of debt
// for count.
func fitsZero(c Charge, left *big.Rat) bool {
	switch c {
	case ChargeUsage:
		return left.Cmp(ratInt(1)) >= 0
	case ChargeCount:
		return left.Sign() >= 0
	}
	return true
}

// debtCap is the most units a bucket of limit l may be owed: Burst, but
// no more than the implementation's 2^62 ticks of debt allow beyond the
// capacity, for the few limits whose capacity is over 2^61 ticks (one tick
// is 1/q ns, with Period/Rate = p/q in lowest terms, so a unit is p ticks).
func debtCap(l Limit) *big.Rat {
	g := new(big.Int).GCD(nil, nil, big.NewInt(int64(l.Period)), big.NewInt(l.Rate)).Int64()
	p := int64(l.Period) / g // ticks per unit, at a coarse resolution fewer
	p /= new(big.Int).GCD(nil, nil, big.NewInt(p), big.NewInt(quantaOf(l).res)).Int64()
	room := new(big.Rat).SetFrac(new(big.Int).Lsh(big.NewInt(1), 62), big.NewInt(p))
	room.Sub(room, ratInt(l.Capacity())) // 2^62 ticks of debt, less the capacity
	if room.Cmp(ratInt(l.Capacity())) < 0 {
		return room
	}
	return ratInt(l.Capacity())
}

// capAt is count + n, at most twice rate (saturated at MaxInt64), and
// never less than count.
func capAt(count, n, rate int64) int64 {
	top := new(big.Int).Mul(big.NewInt(rate), big.NewInt(2))
	if !top.IsInt64() {
		top = big.NewInt(math.MaxInt64)
	}
	sum := new(big.Int).Add(big.NewInt(count), big.NewInt(n))
	if sum.Cmp(top) > 0 {
		sum = top
	}
	return max(count, sum.Int64())
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
	quanta
	rate, period, burst int64
	tokens              *big.Rat
	last                int64
	started             bool
	charge              Charge
	floor               *big.Rat // the fewest tokens usage may leave: -debtCap
}

func newTokenModel(l Limit) *tokenModel {
	floor := new(big.Rat)
	if l.Rate > 0 {
		floor.Neg(debtCap(l))
	}
	return &tokenModel{quanta: quantaOf(l), rate: l.Rate, period: int64(l.Period), burst: l.Capacity(), tokens: ratInt(l.Capacity()), floor: floor}
}

// quanta is a bucket model's reading of time: a limit too long for
// ticks of 1/q ns decides at a coarser resolution (internal/algo's TAT),
// where time is read in whole quanta of res ns, rounded down, and a wait
// ends at a whole quantum.
type quanta struct {
	res int64
	off int64 // how far into its quantum the request being decided is
}

func quantaOf(l Limit) quanta {
	t, err := l.tat()
	if err != nil {
		return quanta{res: 1}
	}
	return quanta{res: int64(t.Resolution())}
}

// read is now rounded down to its quantum, and remembers how far into it
// now is.
func (q *quanta) read(now int64) int64 {
	if q.res == 1 {
		return now
	}
	k := now / q.res
	if now%q.res < 0 {
		k--
	}
	q.off = now - k*q.res
	return k * q.res
}

// wait is the exact wait r ns from the quantum read, ended at a whole
// quantum and counted from the request's time.
func (q *quanta) wait(r *big.Rat) time.Duration {
	if q.res == 1 {
		return ceilNs(r)
	}
	c := ceilNs(new(big.Rat).Quo(r, big.NewRat(q.res, 1)))
	if c == Never || int64(c) > int64(Never)/q.res {
		return Never
	}
	return time.Duration(int64(c)*q.res - q.off)
}

// perUnit is the time one token takes to come back, Period/Rate ns.
func (m *tokenModel) perUnit() *big.Rat { return big.NewRat(m.period, m.rate) }

func (m *tokenModel) allowN(now, n int64) Decision {
	now = m.read(now)
	if m.started && now > m.last {
		dt := new(big.Rat).Mul(ratInt(now-m.last), big.NewRat(m.rate, m.period))
		m.tokens.Add(m.tokens, dt)
		if m.tokens.Cmp(ratInt(m.burst)) > 0 {
			m.tokens = ratInt(m.burst)
		}
	}
	m.last, m.started = now, true
	d := Decision{Limit: m.burst}
	want := need(m.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && fitsZero(m.charge, m.tokens):
		d.Allowed = true
	case n > 0 && n <= m.burst && m.tokens.Cmp(ratInt(n)) >= 0:
		d.Allowed = true
		m.tokens.Sub(m.tokens, ratInt(n))
	default:
		if recorded(m.charge, n, m.rate) {
			m.tokens.Sub(m.tokens, ratInt(n))
			if m.tokens.Cmp(m.floor) < 0 {
				m.tokens.Set(m.floor)
			}
		}
		if want > m.burst || m.rate == 0 {
			d.RetryAfter = Never
			break
		}
		short := new(big.Rat).Sub(ratInt(want), m.tokens)
		if n == 0 && m.charge == ChargeCount {
			short.Neg(m.tokens) // until the bucket is out of debt
		}
		d.RetryAfter = m.wait(short.Mul(short, m.perUnit()))
	}
	d.Remaining = max(floorInt(m.tokens).Int64(), 0)
	if missing := new(big.Rat).Sub(ratInt(m.burst), m.tokens); missing.Sign() > 0 {
		if m.rate == 0 {
			d.ResetAfter = Never
		} else {
			d.ResetAfter = m.wait(missing.Mul(missing, m.perUnit()))
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
	return m.wait(missing.Mul(missing, m.perUnit()))
}

// leakyModel is the textbook leaky bucket as a meter: water and the time of
// the last leak; leak max(0, water - dt·Rate/Period), then pour if it fits.
type leakyModel struct {
	quanta
	rate, period, capacity int64
	water                  *big.Rat
	last                   int64
	started                bool
	charge                 Charge
	top                    *big.Rat // the most water usage may pour: capacity + debtCap
}

func newLeakyModel(l Limit, c Charge) *leakyModel {
	top := ratInt(l.Capacity())
	if l.Rate > 0 {
		top.Add(top, debtCap(l))
	}
	return &leakyModel{quanta: quantaOf(l), rate: l.Rate, period: int64(l.Period), capacity: l.Capacity(), water: new(big.Rat), charge: c, top: top}
}

func (m *leakyModel) allowN(now, n int64) Decision {
	now = m.read(now)
	if m.started && now > m.last {
		m.water.Sub(m.water, new(big.Rat).Mul(ratInt(now-m.last), big.NewRat(m.rate, m.period)))
		if m.water.Sign() < 0 {
			m.water.SetInt64(0)
		}
	}
	m.last, m.started = now, true
	d := Decision{Limit: m.capacity}
	want := need(m.charge, n)
	level := new(big.Rat).Add(m.water, ratInt(want))
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && m.charge == ChargeGate:
		d.Allowed = true
	case want <= m.capacity && level.Cmp(ratInt(m.capacity)) <= 0:
		d.Allowed = true
		m.water.Add(m.water, ratInt(n))
	default:
		if recorded(m.charge, n, m.rate) {
			m.water.Add(m.water, ratInt(n))
			if m.water.Cmp(m.top) > 0 {
				m.water.Set(m.top)
			}
		}
		if want > m.capacity || m.rate == 0 {
			d.RetryAfter = Never
			break
		}
		over := new(big.Rat).Add(m.water, ratInt(want))
		over.Sub(over, ratInt(m.capacity))
		d.RetryAfter = m.wait(over.Mul(over, big.NewRat(m.period, m.rate)))
	}
	d.Remaining = max(floorInt(new(big.Rat).Sub(ratInt(m.capacity), m.water)).Int64(), 0)
	if m.water.Sign() > 0 {
		if m.rate == 0 {
			d.ResetAfter = Never
		} else {
			d.ResetAfter = m.wait(new(big.Rat).Mul(m.water, big.NewRat(m.period, m.rate)))
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
	charge       Charge
	counts       map[int64]int64
}

func (m *fixedModel) allowN(now, n int64) Decision {
	k, elapsed := window(now, m.period)
	end := time.Duration(m.period - elapsed)
	d := Decision{Limit: m.rate}
	want := need(m.charge, n)
	left := new(big.Int).Sub(big.NewInt(m.rate), big.NewInt(m.counts[k]))
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && m.charge == ChargeGate, want <= m.rate && left.Cmp(big.NewInt(want)) >= 0:
		d.Allowed = true
		m.counts[k] += n
	default:
		if recorded(m.charge, n, m.rate) {
			m.counts[k] = capAt(m.counts[k], n, m.rate)
		}
		d.RetryAfter = end
		if want > m.rate {
			d.RetryAfter = Never
		}
	}
	d.Remaining = max(m.rate-m.counts[k], 0)
	if m.counts[k] > 0 {
		d.ResetAfter = end
	}
	return d
}

// logModel keeps every allowed request in a plain slice. Usage past the
// rate is kept too, up to 2·Rate live units; when Rate entries are live,
// as many as the implementation's ring holds, the units join the newest
// entry, which moves to now.
type logModel struct {
	rate, period int64
	charge       Charge
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
	want := need(m.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && m.charge == ChargeGate, want <= m.rate && want <= m.rate-count:
		d.Allowed = true
		if n > 0 {
			m.log = append(m.log, logEntry{now, n})
			count += n
		}
	default:
		if add := min(n, 2*m.rate-count); recorded(m.charge, n, m.rate) && add > 0 {
			count += add
			if int64(len(m.log)) < m.rate {
				m.log = append(m.log, logEntry{now, add})
			} else {
				last := &m.log[len(m.log)-1]
				last.at, last.n = now, last.n+add
			}
		}
		if want > m.rate {
			d.RetryAfter = Never
			break
		}
		left := count
		for _, e := range m.log {
			left -= e.n
			if left <= m.rate-want {
				d.RetryAfter = durationSum(e.at, m.period, -now)
				break
			}
		}
	}
	d.Remaining = max(m.rate-count, 0)
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
	charge       Charge
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
	room := new(big.Int).Sub(big.NewInt(m.rate), big.NewInt(curr))
	room.Sub(room, big.NewInt(n)).Add(room, big.NewInt(1))
	switch {
	case room.Sign() <= 0:
		return -1
	case prev == 0:
		return 0
	}
	// off > P - room·P/prev
	bound := new(big.Rat).Sub(ratInt(m.period), new(big.Rat).Mul(new(big.Rat).SetInt(room), big.NewRat(m.period, prev)))
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
	want := need(m.charge, n)
	switch {
	case n < 0:
		d.RetryAfter = Never
	case n == 0 && m.charge == ChargeGate, want <= m.rate && m.fits(prev, curr, elapsed, want):
		d.Allowed = true
		curr += n
		m.counts[k] = curr
	default:
		if recorded(m.charge, n, m.rate) {
			curr = capAt(curr, n, m.rate)
			m.counts[k] = curr
		}
		if want > m.rate {
			d.RetryAfter = Never
		} else if off := m.firstFit(prev, curr, want); off >= 0 {
			if off <= elapsed {
				panic("counterModel: a denied request fits now")
			}
			d.RetryAfter = time.Duration(off - elapsed)
		} else if off := m.firstFit(curr, 0, want); off >= 0 {
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
