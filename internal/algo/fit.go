package algo

import (
	"fmt"
	"time"
)

// fits reports whether a bucket of rate per period with capacity burst (0:
// rate) has a resolution at which its state is exact.
func fits(rate int64, period time.Duration, burst int64) bool {
	if burst == 0 {
		burst = rate
	}
	for _, res := range resolutions {
		if _, ok := newTAT(rate, period, burst, res); ok {
			return true
		}
	}
	return false
}

// tooLarge is the error for a bucket that fits at no resolution: it names
// the nearest limits that do (Nearest).
func tooLarge(rate int64, period time.Duration, burst int64) error {
	b := burst
	if burst == rate {
		b = 0 // the capacity follows the rate
	}
	err := fmt.Sprintf("a bucket of %s cannot be kept exactly: its refill takes more than 2^62 ticks of 1/rate of a time unit at every unit up to 1s", limitString(rate, period, b))
	alts := Nearest(rate, period, b, time.Second, fits)
	if b != 0 && burst > 0 {
		if c := largestBurst(rate, period, burst); c > 0 {
			alts = append(alts, limitString(rate, period, c))
		}
	}
	return fmt.Errorf("%w: %s%s", ErrTooLarge, err, NearestText(alts))
}

// NearestText is "; the nearest limit that fits is A" or "; the nearest
// limits that fit are A or B" for alts, and "" for none.
func NearestText(alts []string) string {
	switch len(alts) {
	case 0:
		return ""
	case 1:
		return "; the nearest limit that fits is " + alts[0]
	}
	s := "; the nearest limits that fit are " + alts[0]
	for _, a := range alts[1:] {
		s += " or " + a
	}
	return s
}

// limitString formats a limit as sluice.Limit.String does.
func limitString(rate int64, period time.Duration, burst int64) string {
	s := fmt.Sprintf("%d/%v", rate, period)
	if burst != 0 {
		s += fmt.Sprintf(" burst %d", burst)
	}
	return s
}

// Nearest names the limits nearest to rate per period with burst (0: the
// capacity follows the rate) that fits says a store can keep: the largest
// rate below it over the same period, and the same ratio over the longest
// whole period shorter than it (1d, 1h, 1m, 1s, 1ms), formatted as
// sluice.Limit.String does. unit is the coarsest time unit the store
// decides at: rates sharing a divisor with the period in that unit need
// fewer ticks, so they are tried too.
func Nearest(rate int64, period time.Duration, burst int64, unit time.Duration, fits func(rate int64, period time.Duration, burst int64) bool) []string {
	var alts []string
	if r := largestRate(rate, period, burst, unit, fits); r > 0 {
		alts = append(alts, limitString(r, period, burst))
	}
	if r, p, ok := shorterPeriod(rate, period, burst, fits); ok {
		alts = append(alts, limitString(r, p, burst))
	}
	return alts
}

// largestRate is the largest rate below rate, over the same period and with
// burst, that fits; 0 for none. It tries the bound under which every rate
// fits, and rates that share a divisor with the period in units.
func largestRate(rate int64, period time.Duration, burst int64, unit time.Duration, fits func(int64, time.Duration, int64) bool) int64 {
	ps := int64(period) / gcd(int64(period), int64(unit)) // the period in units, or its numerator
	best := int64(0)
	try := func(r int64) {
		if r > best && r < rate && r > 0 && fits(r, period, burst) {
			best = r
		}
	}
	try(maxSpan / ps) // span <= rate·ps
	for bound := int64(1) << 53; bound >= 1<<10; bound >>= 1 {
		try(bound / ps) // a store with a smaller bound than 2^62
	}
	for d := int64(1); d*d <= ps && d <= 1<<20; d++ { // bounded: the period may have no small divisors
		if ps%d == 0 {
			try(rate / d * d)
			try(rate / (ps / d) * (ps / d))
		}
	}
	return best
}

// largestBurst is the largest burst below burst that fits at rate per
// period; 0 for none.
func largestBurst(rate int64, period time.Duration, burst int64) int64 {
	best := int64(0)
	for _, res := range resolutions {
		if t, ok := newTAT(rate, period, 1, res); ok {
			best = max(best, min(burst-1, int64(maxSpan/t.p)))
		}
	}
	return best
}

// shorterPeriod is the same ratio as rate per period over the longest whole
// period (1d, 1h, 1m, 1s, 1ms) shorter than it that fits, if any.
func shorterPeriod(rate int64, period time.Duration, burst int64, fits func(int64, time.Duration, int64) bool) (int64, time.Duration, bool) {
	if burst != 0 {
		return 0, 0, false // a shorter period would shrink the burst too
	}
	for _, u := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second, time.Millisecond} {
		if u >= period || period%u != 0 {
			continue
		}
		k := int64(period / u)
		if rate%k != 0 {
			continue
		}
		if r := rate / k; fits(r, u, 0) {
			return r, u, true
		}
	}
	return 0, 0, false
}
