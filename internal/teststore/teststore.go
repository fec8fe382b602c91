// Package teststore has a small sluice.Store for tests of what sits on
// top of a store.
package teststore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// Narrow allows every request with its full quota left, and, as a
// sluice.RuleChecker, refuses rules whose period is longer than an hour,
// as the Redis store refuses limits outside its exact range.
type Narrow struct{}

func (Narrow) Take(_ context.Context, _ time.Time, checks []sluice.Check, out []sluice.Decision) error {
	for i, c := range checks {
		out[i] = sluice.Decision{Allowed: true, Limit: c.Rule.Quota(), Remaining: c.Rule.Quota()}
	}
	return nil
}

func (Narrow) CheckRule(r *sluice.PreparedRule) error {
	if r.Rule().Limit.Period > time.Hour {
		return fmt.Errorf("teststore: rule %q: a period over an hour: %w", r.Name(), sluice.ErrRefused)
	}
	return nil
}

// Refusing refuses every request as given, as the Redis store refuses the
// checks of one request in different Cluster slots: its errors wrap
// sluice.ErrRefused. It checks no rule in advance.
type Refusing struct{}

func (Refusing) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return fmt.Errorf("teststore: refused: %w", sluice.ErrRefused)
}

// Shedding sheds every request, as a store with too much work in flight
// does: its errors wrap sluice.ErrShed.
type Shedding struct{}

func (Shedding) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return fmt.Errorf("teststore: %w", sluice.ErrShed)
}

// Failing fails every request, as a store that cannot be reached does.
type Failing struct{}

func (Failing) Take(context.Context, time.Time, []sluice.Check, []sluice.Decision) error {
	return errors.New("teststore: connection refused")
}

// Prepare prepares a rule a test declares, which is valid: an error is
// the test's own, and panics.
func Prepare(r sluice.Rule) *sluice.PreparedRule {
	p, err := r.Prepare()
	if err != nil {
		panic("teststore: a test declared an invalid rule: " + err.Error())
	}
	return p
}

// Costed returns checks as a request of cost n makes them, the way the
// tests of stores are written: a check with a Cost of its own keeps it,
// the others cost n, and with n = 0 they peek.
func Costed(n int64, checks []sluice.Check) []sluice.Check {
	cs := slices.Clone(checks)
	for i := range cs {
		if cs[i].Cost == 0 && !cs[i].Peek {
			cs[i].Cost, cs[i].Peek = n, n == 0
		}
	}
	return cs
}
