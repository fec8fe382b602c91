package protocol

import (
	"time"

	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// Bounds on a request's limit override (Envoy's descriptor limit).
const (
	// MaxOverrideRequests is the largest requests_per_unit an override
	// may ask for: a billion per unit is no limit at all, and more is a
	// mistake in the route's metadata.
	MaxOverrideRequests = 1_000_000_000
	// MaxOverridePeriod is the longest period an override may ask for,
	// its unit times its unit_multiplier: a year, the longest unit.
	MaxOverridePeriod = 365 * 24 * time.Hour
)

// overrideUnits are the lengths of the units an override may name, as the
// config reads them (a month is 30 days, a year 365) and as
// envoyproxy/ratelimit divides time by them.
var overrideUnits = map[typepb.RateLimitUnit]time.Duration{
	typepb.RateLimitUnit_SECOND: time.Second,
	typepb.RateLimitUnit_MINUTE: time.Minute,
	typepb.RateLimitUnit_HOUR:   time.Hour,
	typepb.RateLimitUnit_DAY:    24 * time.Hour,
	typepb.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typepb.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overrideLimit checks an override's values and returns its limit. field
// names the override in the error, a *decide.BadRequest.
func overrideLimit(field string, rate uint32, unit typepb.RateLimitUnit, mult *uint32) (sluice.Limit, error) {
	switch {
	case rate == 0:
		return sluice.Limit{}, decide.Badf("%s.requests_per_unit: must be at least 1", field)
	case rate > MaxOverrideRequests:
		return sluice.Limit{}, decide.Badf("%s.requests_per_unit: %d is more than the most allowed, %d", field, rate, MaxOverrideRequests)
	}
	d, ok := overrideUnits[unit]
	if !ok {
		return sluice.Limit{}, decide.Badf("%s.unit: %v is not a unit; want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", field, unit)
	}
	k := uint32(1)
	if mult != nil {
		if k = *mult; k == 0 {
			return sluice.Limit{}, decide.Badf("%s.unit_multiplier: must be at least 1", field)
		}
	}
	if time.Duration(k) > MaxOverridePeriod/d {
		return sluice.Limit{}, decide.Badf("%s.unit_multiplier: %d %v makes a period longer than a year", field, k, unit)
	}
	return sluice.Limit{Rate: int64(rate), Period: time.Duration(k) * d}, nil
}
