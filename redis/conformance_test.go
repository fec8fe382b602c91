package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/storetest"
)

// µsStore rounds the waits of a Store's decisions up to the microsecond,
// as storetest expects of a store whose resolution is a µs. The Redis
// store is finer: its waits are the algorithms' to the ns
// (TestSameDecisions), which this suite's model, rounded, does not take.
type µsStore struct{ s *redis.Store }

func (m µsStore) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	if err := m.s.Take(ctx, now, checks, out); err != nil {
		return err
	}
	for i := range checks {
		out[i].RetryAfter, out[i].ResetAfter = ceilµs(out[i].RetryAfter), ceilµs(out[i].ResetAfter)
	}
	return nil
}

// Resolution is the store's, which the suite asks to model a bucket the
// script decides at a coarser unit than a µs.
func (m µsStore) Resolution(r *sluice.PreparedRule) (time.Duration, error) {
	return m.s.Resolution(r)
}

func ceilµs(d time.Duration) time.Duration {
	if d == sluice.Never || d%time.Microsecond == 0 {
		return d
	}
	return d.Truncate(time.Microsecond) + time.Microsecond
}

// TestConformance runs the stores' conformance suite, at the caller's
// time, with the denial cache off (it reports Remaining as of the denial):
// by FCALL, and by EVALSHA as on a server without functions.
func TestConformance(t *testing.T) {
	srv := startRedis(t)
	for _, by := range []struct {
		name   string
		client func(testing.TB) *goredis.Client
	}{
		{"fcall", srv.client},
		{"evalsha", func(t testing.TB) *goredis.Client { return scriptOnlyClient(t, srv) }},
	} {
		t.Run(by.name, func(t *testing.T) {
			storetest.Run(t, storetest.Config{
				New: func(t *testing.T) sluice.Store {
					return µsStore{newCallerStoreOn(t, by.client(t))}
				},
				Resolution: time.Microsecond,
			})
		})
	}
}
