package sluice

// GCRA is the generic cell rate algorithm: one theoretical arrival time
// (TAT) per limiter. A request of cost n at now is allowed iff
// max(TAT, now) + n·T <= now + Burst·T, where T = Period/Rate is the
// emission interval; then TAT advances by n·T. It makes the token bucket's
// decisions with a single number of state, which is why stores use it.
//
// It is safe for concurrent use and lock-free.
type GCRA struct{ bucket }

// NewGCRA returns a GCRA limiter for l, with a full burst available.
func NewGCRA(l Limit) (*GCRA, error) {
	x := new(GCRA)
	if err := x.init(l); err != nil {
		return nil, err
	}
	return x, nil
}
