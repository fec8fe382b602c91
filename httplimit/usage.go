package httplimit

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"

	"github.com/sluicehq/sluice"
)

// WithUsage adds a rule charged by usage, after the fact: for costs known
// only once the handler has done its work, such as the tokens of an LLM's
// answer or the bytes it streamed. On the way in the request peeks at
// the rule (Check.Peek), which records nothing and denies while less
// than one unit is left (the rule in debt); once the handler returns, the
// rule is charged what the handler reported with ReportUsage, whatever is
// left, so a request that used more than was left takes the rule into
// debt and the requests after it are denied until the debt drains (see
// sluice.ChargeUsage). The rule's Charge is set to sluice.ChargeUsage
// unless it is sluice.ChargeCount. Otherwise it is a rule as WithRule
// gives: it takes part in the decision on the way in, and in the response
// fields.
func WithUsage(rule sluice.Rule, key KeyFunc) Option {
	if rule.Charge != sluice.ChargeCount {
		rule.Charge = sluice.ChargeUsage
	}
	return func(o *options) { o.given = append(o.given, ruleKey{rule: rule, key: key, usage: true}) }
}

// usageKey is the context key under which a request that WithUsage rules
// apply to carries its *usage.
type usageKey struct{}

// usage is what a request's handler has reported it used.
type usage struct{ n atomic.Int64 }

// add adds n, saturating at math.MaxInt64.
func (u *usage) add(n int64) {
	for {
		old := u.n.Load()
		sum := old + n
		if sum < old {
			sum = math.MaxInt64
		}
		if u.n.CompareAndSwap(old, sum) {
			return
		}
	}
}

// ReportUsage adds n to what the request whose context is ctx used, in the
// units of its WithUsage rules, which are charged the total once the
// handler returns. A handler calls it with its request's context, or any
// context made from it, as often as it likes, from any goroutine, before
// it returns; what is reported after is lost. It does nothing for a
// request that no WithUsage rule applies to, and refuses a negative n.
func ReportUsage(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("httplimit: usage %d is negative", n)
	}
	if u, _ := ctx.Value(usageKey{}).(*usage); u != nil {
		u.add(n)
	}
	return nil
}

// serveUsage serves an allowed request to next, then charges its WithUsage
// checks (s.checks where the rule is one) with what next reported. The
// charge is made whether the client is still there or not, and if next
// panics: the work was done. Its decision is not the client's concern;
// a store that failed or refused is told to the failure hook.
func (m *Middleware) serveUsage(w http.ResponseWriter, r *http.Request, next http.Handler, s *scratch) {
	u := new(usage)
	r = r.WithContext(context.WithValue(r.Context(), usageKey{}, u))
	defer func() {
		n := u.n.Load()
		if n == 0 {
			// Nothing used, nothing to charge: a check of Cost 0 takes one.
			return
		}
		charge := s.usage[:0]
		for j := range s.checks {
			if m.rules[s.idx[j]].usage {
				charge = append(charge, sluice.Check{Rule: s.checks[j].Rule, Key: s.checks[j].Key, Cost: n})
			}
		}
		s.usage = charge
		res, err := m.limiter.Take(context.WithoutCancel(r.Context()), charge, s.out[:0])
		if err == nil {
			s.out, err = res.Decisions, res.Err
		}
		if err != nil && m.failure != nil {
			m.failure(r, fmt.Errorf("httplimit: charging %d used: %w", n, err))
		}
	}()
	next.ServeHTTP(w, r)
}
