package redis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// ErrOutOfRange is wrapped by the error for a limit or a time the script
// cannot hold exactly in the doubles of Redis's Lua. It wraps
// sluice.ErrLimitTooLarge and sluice.ErrRefused too, so errors.Is finds
// any of them, and a sluice.Limiter returns it rather than failing open.
// docs/redis.md (Exact arithmetic in doubles) gives the range.
var ErrOutOfRange = fmt.Errorf("redis: out of the exact range: %w (%w)", sluice.ErrLimitTooLarge, sluice.ErrRefused)

// The script's numbers are doubles, exact for integers up to 2^53. These
// bounds leave room for the sums and the 2^26-limb products it makes.
const (
	maxSpan     = 1 << 51 // a full bucket's debt, in units
	maxTickRate = 1 << 52 // 1000·q: units of h/q ns in a µs, times h
	maxRate     = 1e12    // a window's Rate: 1000·Rate stays exact
	maxPeriodUS = 1 << 51 // a window's Period in µs (71 years)
	maxNowUS    = 1 << 52 // |now| in µs since the epoch (year 2112)
)

// kinds of state, as the script numbers them (ARGV, in take.lua).
const (
	kindBucket  = 1
	kindFixed   = 2
	kindCounter = 3
	kindLog     = 4
	kindWindow  = 5 // a fixed window as a counter per window: with the store's clock
)

// logSpan is how many Periods a sliding log's TTL, once set, serves on
// the one-unit path, which sets it only by a push whose oldest entry in
// the window is of an earlier aligned span of that many, the first push of
// each span among them (see take.lua): an idle log goes within that many
// Periods, one more and the slack. 2 spares Redis about half the PEXPIREs
// of setting it at every push, and an idle log's key still goes within
// three Periods and the slack.
const logSpan = 2

// idleSlack is added to every TTL, unless WithClockSkew adds more. A
// key's TTL is counted in Redis's clock from when the script wrote it,
// while its state is read at the time of later decisions: with
// WithCallerTime, the callers' clocks; at Redis TIME, the store's clock,
// which does not go back when Redis's does. The slack keeps a key for
// those clocks' disagreement, and for the time a request spends between
// its caller and Redis, so that no key expires while its state still
// counts.
const idleSlack = time.Second

// params is a rule made ready for the script: its ARGV values, computed
// once per rule and kept with the rule's compiled arithmetic (see
// paramsOf).
type params struct {
	kind int
	code string   // the key suffix naming the state's layout
	a    [7]int64 // a1..a7 as the script reads them
	ttl  int64    // ms: the longest a state of this rule stays live, idleSlack aside; 0 for ever
	// dttl is a bucket's ttl for a state in debt past a full bucket's,
	// which usage charges record (see charge): twice ttl. 0 for the
	// windows, whose keys' TTLs cover their debt as it is.
	dttl   int64
	charge algo.Charge
	limit  sluice.Limit // the rule's, which a denial is remembered under
	quota  int64
	err    error // why the store cannot hold the rule (ErrOutOfRange), or nil
	// rec is the rule as the script reads it (see record), with the
	// default slack: [windowed][shadow]. windowed is a fixed window as a
	// counter per window (kind 5), under the store's clock. skewed is rec
	// with another slack (WithClockSkew), made on first use by a store
	// that sets one.
	rec    [2][2]string
	skewed atomic.Pointer[skewedRecords]
	// wcode is the key suffix of a fixed window's counters, before the
	// window's start: "w:" for a start in Unix seconds, "wu:" in µs.
	wcode string
}

// The key suffixes of a fixed window's counters, before the window's
// start: in Unix seconds, or in µs for a period not in whole seconds.
const (
	windowSeconds = "w:"
	windowMicros  = "wu:"
)

// skewedRecords is a rule's records with a slack other than idleSlack.
type skewedRecords struct {
	slack time.Duration
	rec   [2][2]string
}

// records is the rule as the script reads it with slack added to its
// TTLs: [windowed][shadow], as rec. Another slack than the default is
// kept with the rule, one at a time: a process has one, most often.
func (p *params) records(slack time.Duration) *[2][2]string {
	if slack == idleSlack {
		return &p.rec
	}
	if sk := p.skewed.Load(); sk != nil && sk.slack == slack {
		return &sk.rec
	}
	sk := &skewedRecords{slack: slack}
	p.fill(&sk.rec, slack)
	p.skewed.Store(sk)
	return &sk.rec
}

// fill makes rec's records with slack.
func (p *params) fill(rec *[2][2]string, slack time.Duration) {
	for w := range rec {
		for shadow := range rec[w] {
			rec[w][shadow] = p.record(w == 1, shadow == 1, slack)
		}
	}
}

// record is the rule as the script reads it (ARGV, in take.lua): kind,
// its modes (shadow in bit 0, the charge above), a1..a6, the TTL of its
// keys in ms and a bucket's TTL in debt (dttl), strings made here so that
// Redis does not format a Lua number per call; slack is added to the TTLs.
func (p *params) record(windowed, shadow bool, slack time.Duration) string {
	kind, a := p.kind, p.a
	if windowed && kind == kindFixed {
		kind = kindWindow
		a[2] = 1 // the window's start in µs, unless in whole seconds
		if a[1]%1e6 == 0 {
			a[2] = 1e6
		}
	}
	b := make([]byte, 0, 2+7*8+32)
	b = append(b, byte(kind), byte(p.charge)<<1)
	if shadow {
		b[1] |= 1
	}
	for _, v := range a {
		b = appendF64(b, float64(v)) // exact: every bound in newParams is below 2^53
	}
	for _, ttl := range []int64{p.ttl, p.dttl} {
		if ttl > 0 {
			b = strconv.AppendInt(b, ttl+slack.Milliseconds(), 10)
		}
		b = append(b, 0)
	}
	return string(b)
}

// paramsOf returns the params of a rule compiled into sp, computing them
// on first use and keeping them with sp: a rule that changes is compiled
// into a new Spec, whose params are computed afresh, so the store keeps no
// cache of rules. The error wraps ErrOutOfRange for a rule outside the
// script's exact range.
func paramsOf(sp *algo.Spec) (*params, error) {
	p, ok := sp.Derived(algo.ExtRedis).(*params)
	if !ok {
		p = newParams(sp)
		sp.SetDerived(algo.ExtRedis, p)
	}
	return p, p.err
}

// newParams prepares the arguments of the rule compiled into sp, or the
// error that says why the script cannot hold it.
//
// Buckets: with Period/Rate = p/q in lowest terms (p ns per q units), the
// algorithms count time in ticks of 1/q ns. At whole-µs times every debt is
// a multiple of h = gcd(1000, p) ticks, so the script counts units of h/q
// ns: a request unit costs pt = p/h, a µs is m = 1000q/h, a full bucket is
// span = Burst·pt. A duration of x units is ⌊x/m⌋ µs plus ⌈(x mod m)·h/q⌉
// ns: exactly the algorithms' ⌈x·h/q⌉ ns. The bounds keep every sum of
// debts (at most 2·span + m) and every product in the script below 2^53.
func newParams(sp *algo.Spec) *params {
	l := sluice.Limit{Rate: sp.Key.Rate, Period: sp.Key.Period, Burst: sp.Key.Burst}
	p := &params{quota: sp.Quota(), charge: sp.Charge, limit: l}
	var err error
	switch sp.Kind {
	case algo.KindBucket, algo.KindWide:
		if err = p.bucket(sp.TAT.Resolution()); err != nil {
			err = fmt.Errorf("%w%s", err, algo.NearestText(nearestBucket(l)))
		}
	case algo.KindFixed:
		err = p.window(kindFixed, "f")
	case algo.KindCounter:
		err = p.window(kindCounter, "c")
	default:
		err = p.window(kindLog, "lu")
	}
	if err != nil {
		p.err = fmt.Errorf("%w: rule %q: %w", ErrOutOfRange, sp.Key.Name, err)
		return p
	}
	p.fill(&p.rec, idleSlack)
	return p
}

// bucket sets p's arithmetic for a bucket of p.limit (see newParams), or
// errs for a limit outside the exact range. res is the resolution the
// rule's algorithm decides at (algo.TAT.Resolution): the script decides
// at the same, or at the finest coarser one (1ms, 1s) whose full bucket
// fits in its doubles.
func (p *params) bucket(res time.Duration) error {
	var first error
	for _, qu := range []int64{1, 1000, 1e6} {
		if qu*1000 < int64(res) {
			continue
		}
		err := p.bucketAt(qu)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// bucketAt is bucket deciding at whole quanta of qu µs. With
// Period/Rate = p/q ns in lowest terms and h = gcd(1000·qu, p), the
// script counts units of h/q ns: a request unit costs pt = p/h, a quantum
// is m = 1000·qu·q/h units. Most limits decide at qu = 1, every µs.
func (p *params) bucketAt(qu int64) error {
	l := p.limit
	p.kind, p.code = kindBucket, "b"
	burst := l.Capacity()
	pp, q, h := int64(1), int64(0), int64(1)
	if l.Rate > 0 {
		g := gcd(int64(l.Period), l.Rate)
		pp, q = int64(l.Period)/g, l.Rate/g
		h = gcd(1000*qu, pp)
	}
	pt := pp / h
	if q > maxTickRate/(1000*qu) {
		return fmt.Errorf("%v is more than 2^52 ticks per µs", l)
	}
	m := 1000 * qu / h * q
	if burst > 0 && pt > maxSpan/burst {
		return fmt.Errorf("a bucket of %v is more than 2^51 units of %d/%d ns at every time unit up to 1s, where the script's doubles are exact", l, h, max(q, 1))
	}
	p.a = [7]int64{burst * pt, pt, m, h, q, burst, qu}
	// A bucket's debt is at most a full bucket's, span units of h/q
	// ns, or twice that in debt recorded by a usage charge: its state
	// is idle that long after it was written, at most, and a quantum
	// more at a coarse one: it drains by whole quanta from the start of
	// the one it was written in.
	if q > 0 {
		p.ttl = satAdd(mulDivCeil(burst*pt, h, q*1e6), qu/1000)
		p.dttl = satAdd(mulDivCeil(2*burst*pt, h, q*1e6), qu/1000)
	}
	// The debt is kept in units of h/q ns (h/q in lowest terms), or
	// of requests at Rate 0, and its time in whole quanta of qu µs: a
	// limit with other units must not read it as its own, so they name
	// the state ("b" for the common µs).
	switch {
	case q == 0:
		p.code = "b0"
	case h != 1000 || q != 1:
		p.code = "b" + strconv.FormatInt(h, 10) + "/" + strconv.FormatInt(q, 10)
	}
	if qu != 1 {
		p.code += "@" + strconv.FormatInt(qu, 10)
	}
	return nil
}

// resolution is the quantum of time the script decides the rule at: a
// bucket's quantum (a7, in µs), or a µs.
func (p *params) resolution() time.Duration {
	if p.kind == kindBucket {
		return time.Duration(p.a[6]) * time.Microsecond
	}
	return time.Microsecond
}

// mulDivCeil is ⌈a·b/c⌉ for a, b >= 0, c > 0, saturated at MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, uint64(c-1), 0)
	hi += carry
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}

// satAdd is a+b for a, b >= 0, saturated at MaxInt64.
func satAdd(a, b int64) int64 { return min(a, math.MaxInt64-b) + b }

// nearestBucket names the limits nearest to l that a bucket in the script
// holds exactly (see algo.Nearest).
func nearestBucket(l sluice.Limit) []string {
	fits := func(rate int64, period time.Duration, burst int64) bool {
		p := &params{limit: sluice.Limit{Rate: rate, Period: period, Burst: burst}}
		return p.bucket(0) == nil
	}
	alts := algo.Nearest(l.Rate, l.Period, l.Burst, time.Microsecond, fits)
	if l.Burst > 1 && fits(l.Rate, l.Period, 1) {
		// the largest burst that fits: a smaller one always does
		lo, hi := int64(1), l.Burst-1
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if fits(l.Rate, l.Period, mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		alts = append(alts, sluice.Limit{Rate: l.Rate, Period: l.Period, Burst: lo}.String())
	}
	return alts
}

// window sets p's arithmetic for a window of kind k, its state's layout
// code, for p.limit, or errs for a limit outside the exact range.
func (p *params) window(k int, code string) error {
	l := p.limit
	p.kind, p.code = k, code
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("a window's period must be whole microseconds, not %v", l.Period)
	}
	us := int64(l.Period / time.Microsecond)
	if us > maxPeriodUS {
		return fmt.Errorf("period %v is more than 2^51 µs", l.Period)
	}
	if l.Rate > maxRate {
		return fmt.Errorf("rate %d is more than 10^12 per window", l.Rate)
	}
	a := [7]int64{l.Rate, us}
	// A window's state is written in its window and counts until its
	// end, or the next's for the sliding counter; the log's entries
	// count for a period.
	p.ttl = ceilDiv(us, 1000)
	switch p.kind {
	case kindCounter:
		p.ttl *= 2 // the counter's state counts into the next window
	case kindLog:
		// The log's TTL is set lazily, once in each aligned span
		// (a3) of logSpan Periods at least (see logSpan), and keeps
		// the key a Period past the span's end.
		a[2] = logSpan * us
		p.ttl *= logSpan + 1
	}
	p.a = a
	p.wcode = windowSeconds
	if us%1e6 != 0 {
		p.wcode = windowMicros
	}
	return nil
}

// ceilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// windowed reports whether the rule's state is a counter per window with
// the store's clock on.
func (p *params) windowed(clock bool) bool { return clock && p.kind == kindFixed }

// codeFor is the suffix of the rule's key with the store's clock on or off.
func (p *params) codeFor(clock bool) string {
	if p.windowed(clock) {
		return p.wcode
	}
	return p.code
}

// appendF64 appends v as the script unpacks it: a little-endian double.
func appendF64(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// errNowRange is returned for a caller's time the script cannot hold.
var errNowRange = errors.New("time outside ±2^52 µs of the Unix epoch")

// micros is t in whole µs since the epoch, rounded down.
func micros(t time.Time) (int64, error) {
	s := t.Unix()
	if s > maxNowUS/1_000_000 || s < -maxNowUS/1_000_000 {
		return 0, fmt.Errorf("%w: %v: %w", ErrOutOfRange, t, errNowRange)
	}
	return s*1e6 + int64(t.Nanosecond()/1000), nil
}

// duration turns the script's µs and ns into a duration; -1 µs is Never.
func duration(us, ns int64) time.Duration {
	if us < 0 {
		return sluice.Never
	}
	if us > (int64(sluice.Never)-1000)/1000 {
		return sluice.Never
	}
	return time.Duration(us*1000 + ns)
}

// expand writes to b the six numbers of a decision of the script (allowed,
// remaining, retry µs and ns, reset µs and ns) from v, the one number
// the script answers for a unit taken at now on its path of its own: the
// bucket's debt after, or the window's count after, times 2, plus 1 if
// allowed; a sliding log's answer is in the case below (see lstretch).
// The arithmetic is the script's (take.lua: bucket, wdecision, slog), done
// here to spare Redis the work.
func (p *params) expand(b []int64, v, now int64) []int64 {
	ok, x := v&1, v>>1
	var rem, rus, rns, zus, zns int64
	if p.kind == kindCounter {
		return p.expandCounter(b, x, now)
	}
	if p.kind == kindLog {
		// allowed: the count after, the newest entry now; denied: the
		// waits until the oldest entry and the newest leave the window
		if ok == 1 {
			return append(b, 1, p.a[0]-x, 0, 0, p.a[1], 0)
		}
		return append(b, 0, 0, x>>26, 0, x&(1<<26-1), 0)
	}
	if p.kind == kindBucket {
		span, pt, q := p.a[0], p.a[1], p.a[4]
		if x <= span {
			rem = (span - x) / pt
		}
		if ok == 0 {
			if q == 0 {
				rus = -1
			} else {
				rus, rns = p.usns(x + pt - span) // > 0: denied
			}
		}
		if x > 0 {
			if q == 0 {
				zus = -1
			} else {
				zus, zns = p.usns(x)
			}
		}
	} else {
		rate, per := p.a[0], p.a[1]
		off := now % per
		if off < 0 {
			off += per
		}
		rem = max(rate-x, 0)
		if ok == 0 {
			rus = per - off
		}
		if x > 0 {
			zus = per - off
		}
	}
	return append(b, ok, rem, rus, rns, zus, zns)
}

// usns is a bucket's wait for y > 0 units of debt, in µs and ns as the
// script says it (take.lua: usns), the ns rounded up. Only a bucket
// decided every µs takes the script's path of its own (see fastRule).
func (p *params) usns(y int64) (us, ns int64) {
	m, h, q := p.a[2], p.a[3], p.a[4]
	return y / m, ceilDiv(y%m*h, q)
}

// expandCounter is expand for a sliding counter, whose script answers the
// counts it decided from, rolled to now's window, packed as
// prev·(Rate+1) + curr (see cstretch in take.lua): the decision is the
// algorithm's own (internal/algo, as the memory store decides), made again
// from them at now, in ns.
func (p *params) expandCounter(b []int64, x, now int64) []int64 {
	rate, per := p.a[0], p.a[1]
	prev, curr := x/(rate+1), x%(rate+1)
	k := windowOf(now, per)
	w := algo.NewWindow(rate, time.Duration(per)*time.Microsecond)
	st := algo.CounterState{Window: k, Prev: prev, Curr: curr, Last: now * 1000, Used: true}
	d := w.Counter(&st, now*1000, 1)
	ok := int64(0)
	if d.Allowed {
		ok = 1
	}
	rus, rns := usns(d.RetryAfter)
	zus, zns := usns(d.ResetAfter)
	return append(b, ok, d.Remaining, rus, rns, zus, zns)
}

// windowOf is the index of the window of per µs holding now: ⌊now/per⌋.
func windowOf(now, per int64) int64 {
	k := now / per
	if now%per < 0 {
		k--
	}
	return k
}

// usns is d as the script's µs and ns; Never is -1 µs.
func usns(d time.Duration) (us, ns int64) {
	if d == algo.Never {
		return -1, 0
	}
	return int64(d / 1000), int64(d % 1000)
}

// appendWindowStart appends to b the start of the window holding now (µs
// since the epoch) as a fixed window's key ends in it (see keys.go): in
// Unix seconds for a period of whole seconds, else in µs. At most 20
// bytes.
func (p *params) appendWindowStart(b []byte, now int64) []byte {
	per := p.a[1]
	k := windowOf(now, per)
	if per%1e6 == 0 {
		return strconv.AppendInt(b, k*(per/1e6), 10)
	}
	return strconv.AppendInt(b, k*per, 10)
}
