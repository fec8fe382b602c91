package httplimit

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// Header field names, in the canonical form http.Header keeps them in.
const (
	headerPolicy      = "Ratelimit-Policy" // RateLimit-Policy
	headerLimit       = "Ratelimit"        // RateLimit
	headerRetryAfter  = "Retry-After"
	headerLegacyLimit = "X-Ratelimit-Limit"
	headerLegacyLeft  = "X-Ratelimit-Remaining"
	headerLegacyReset = "X-Ratelimit-Reset"
)

// writeHeaders sets the fields of a decided request on h: RateLimit-Policy
// and RateLimit for the enforced rules, the legacy fields if asked, and
// Retry-After on a denial. See the package documentation for the values.
func (m *Middleware) writeHeaders(h http.Header, s *scratch, res *sluice.Result) {
	retry := fields.RetryAfter(res.Decision) // -1: no Retry-After

	policy := m.policy
	buf := s.buf[:0]
	n := 0 // enforced members written
	for j, c := range s.checks {
		if c.Rule.Shadow() {
			continue
		}
		n++
		buf = fields.AppendLimit(buf, m.rules[s.idx[j]].sf, res.Decisions[j], retry)
	}
	s.buf = buf
	if n == 0 {
		return // only shadow rules: nothing is enforced, nothing to say
	}
	if n != m.enforced {
		policy = m.policyOf(s)
	}

	// A fresh backing array: the header map outlives this request's
	// scratch, which goes back to the pool.
	vals := make([]string, 0, 6)
	add := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	add(headerPolicy, policy)
	if res.Err == nil {
		// The store answered: what is left is known. When it failed, the
		// failure policy decided and there is nothing true to report.
		add(headerLimit, string(buf))
		if m.legacy {
			add(headerLegacyLimit, strconv.FormatInt(res.Limit, 10))
			add(headerLegacyLeft, strconv.FormatInt(res.Remaining, 10))
			add(headerLegacyReset, strconv.FormatInt(fields.Seconds(res.ResetAfter), 10))
		}
	}
	if retry >= 0 {
		add(headerRetryAfter, strconv.FormatInt(retry, 10))
	}
}

// policyOf joins the policy members of the enforced rules among the
// request's checks, when some rules were skipped.
func (m *Middleware) policyOf(s *scratch) string {
	var b []byte
	for j, c := range s.checks {
		if !c.Rule.Shadow() {
			b = fields.Append(b, m.rules[s.idx[j]].member)
		}
	}
	return string(b)
}
