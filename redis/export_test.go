package redis

import "time"

// WithTTLSlack adds d to every TTL. Tests that drive the time with
// WithCallerTime faster or slower than Redis's clock use it so that a key
// does not expire, in Redis time, while its state still matters at the
// caller's time.
func WithTTLSlack(d time.Duration) Option { return func(s *Store) error { s.ttlSlack = d; return nil } }

// CacheLen is the number of denials cached.
func (s *Store) CacheLen() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.len()
}
