package server

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) and
// Retry-After, formatted by internal/fields as packages httplimit and
// grpclimit format them:
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-ip";r=0;t=1, "daily";r=9957;t=1
//	Retry-After: 1
const (
	fieldPolicy     = "RateLimit-Policy"
	fieldRateLimit  = "RateLimit"
	fieldRetryAfter = "Retry-After"
)

// rlFields are the field values of one decided request.
type rlFields struct {
	policy     string // RateLimit-Policy; "" when no enforced rule applied
	rateLimit  string // RateLimit; "" when the store failed
	retryAfter string // Retry-After; "" unless denied with a finite wait
}

// headers lists the fields that are set, as name, value pairs.
func (f rlFields) headers() [][2]string {
	h := make([][2]string, 0, 3)
	for _, kv := range [][2]string{{fieldPolicy, f.policy}, {fieldRateLimit, f.rateLimit}, {fieldRetryAfter, f.retryAfter}} {
		if kv[1] != "" {
			h = append(h, kv)
		}
	}
	return h
}

// makeFields formats the fields for the checks of a request, in buf's
// room if it has enough: one member
// per check whose rule is enforced (not in shadow mode). res is the
// combined decision; ds[j] is check j's own. When the store failed, the
// failure modes decided and what is left is not known: there is no
// RateLimit field.
func makeFields(buf []byte, checks []check, ds []sluice.Decision, res sluice.Decision, storeErr error) rlFields {
	var f rlFields
	retry := fields.RetryAfter(res)
	if retry >= 0 {
		f.retryAfter = strconv.FormatInt(retry, 10)
	}
	// Both fields in one buffer and one string: RateLimit-Policy, then
	// RateLimit.
	b := buf[:0]
	for j := range checks {
		if !checks[j].lim.rule.Shadow() {
			b = fields.Append(b, checks[j].lim.policy)
		}
	}
	np := len(b)
	rl := b[np:np] // RateLimit's own list, in b's room when it fits
	for j := range checks {
		if c := &checks[j]; !c.lim.rule.Shadow() {
			rl = fields.AppendLimit(rl, c.lim.sf, ds[j], retry)
		}
	}
	both := string(append(b, rl...))
	f.policy = both[:np]
	if storeErr == nil {
		f.rateLimit = both[np:]
	}
	return f
}

// policyOf returns a rule's name as an RFC 8941 string and its
// RateLimit-Policy member. The config allows UTF-8 names, which an
// sf-string cannot hold: their other bytes are written as %XX.
func policyOf(r sluice.Rule) (sf, member string) {
	if sf, member, err := fields.Policy(&r); err == nil {
		return sf, member
	}
	var b strings.Builder
	for i := 0; i < len(r.Name); i++ {
		if c := r.Name[i]; c < 0x20 || c > 0x7e {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	ascii := r
	ascii.Name = b.String()
	sf, member, _ = fields.Policy(&ascii) // printable ASCII now
	return sf, member
}
