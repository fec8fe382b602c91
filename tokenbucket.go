package sluice

// TokenBucket is a bucket of Burst tokens (Rate when Burst is 0), full at
// the start and refilled continuously at Rate per Period. A request of cost
// n is allowed iff the bucket holds at least n tokens, which it then takes.
// Over any interval d a client gets at most Burst + d·Rate/Period, and one
// that asks all the time gets exactly that.
//
// It is safe for concurrent use and lock-free. Its decisions are those of
// LeakyBucket and GCRA: it is the same arithmetic, under the name most
// people know.
type TokenBucket struct{ bucket }

// NewTokenBucket returns a full token bucket for l.
func NewTokenBucket(l Limit) (*TokenBucket, error) {
	x := new(TokenBucket)
	if err := x.init(l); err != nil {
		return nil, err
	}
	return x, nil
}
