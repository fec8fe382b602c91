package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Poisson returns the arrivals of a Poisson stream of rate requests per
// second over [0, span), from a generator seeded with seed: the same
// arguments give the same arrivals. It returns an error, and no
// arrivals, when there would be more than limit of them.
func Poisson(rate float64, span time.Duration, seed uint64, limit int) ([]time.Duration, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("rate %v: want a positive number of requests a second", rate)
	}
	if span <= 0 {
		return nil, fmt.Errorf("span %v: want a positive duration", span)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x736c75696365)) // "sluice"
	var at []time.Duration
	t := 0.0 // seconds
	end := span.Seconds()
	for {
		// Exponential gaps of mean 1/rate.
		t += rng.ExpFloat64() / rate
		if t >= end {
			return at, nil
		}
		if len(at) == limit {
			return nil, fmt.Errorf("a Poisson stream of %v a second over %s makes more than %d arrivals", rate, FmtDur(span), limit)
		}
		at = append(at, time.Duration(t*float64(time.Second)))
	}
}
