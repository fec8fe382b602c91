package sluice

// LeakyBucket is the leaky bucket as a meter: a bucket of capacity Burst
// (Rate when Burst is 0) that leaks Rate units per Period and starts empty.
// A request of cost n is allowed iff water + n <= capacity, and then pours
// n in. There is no queue: what does not fit is denied at once. To delay
// requests instead of denying them, use LeakyQueue.
//
// Its water is exactly Burst minus the TokenBucket's tokens, so it makes the
// same decisions. It is safe for concurrent use and lock-free.
type LeakyBucket struct{ bucket }

// NewLeakyBucket returns an empty leaky bucket for l.
func NewLeakyBucket(l Limit) (*LeakyBucket, error) {
	x := new(LeakyBucket)
	if err := x.init(l); err != nil {
		return nil, err
	}
	return x, nil
}
