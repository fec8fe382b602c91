package grpclimit

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// The response header metadata of the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers), lowercase as gRPC metadata is.
// The values are those package httplimit writes:
//
//	ratelimit-policy: "per-ip";q=100;w=60
//	ratelimit: "per-ip";r=42;t=17
//
// one list member per rule that applied and is not in shadow mode. q is the
// rule's quota (sluice.Rule.Quota); w is the window in seconds over which q
// units are granted: the Period for the windows, the time to refill the
// whole burst for the buckets and GCRA, rounded up, and left out when the
// quota never refills. r is the units left; t is the seconds, rounded up,
// until the rule is back to idle (ResetAfter), but never later than the
// call's retry delay on a denial, and left out when that is never.
// "ratelimit" is left out when the store failed and a failure policy
// decided: nothing true can be said of what is left.
const (
	MetadataRateLimit       = "ratelimit"
	MetadataRateLimitPolicy = "ratelimit-policy"
)

// rateFields returns the ratelimit and ratelimit-policy values for a
// decided call, "" when no enforced rule applied. rules[j] is checks[j]'s
// rule.
func rateFields(rules []*rule, checks []sluice.Check, res *sluice.Result) (rl, policy string) {
	retry := fields.RetryAfter(res.Decision)
	var rb, pb []byte
	for j, c := range checks {
		if c.Rule.Shadow() {
			continue
		}
		pb = fields.Append(pb, rules[j].policy)
		rb = fields.AppendLimit(rb, rules[j].sfName, res.Decisions[j], retry)
	}
	if len(pb) == 0 {
		return "", ""
	}
	if res.Err != nil {
		rb = nil
	}
	return string(rb), string(pb)
}
