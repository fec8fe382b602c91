package decide

import (
	"strconv"

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
	FieldPolicy     = "RateLimit-Policy"
	FieldRateLimit  = "RateLimit"
	FieldRetryAfter = "Retry-After"
)

// Fields are the field values of one decided request.
type Fields struct {
	Policy     string // RateLimit-Policy; "" when no enforced rule applied
	RateLimit  string // RateLimit; "" when the store failed
	RetryAfter string // Retry-After; "" unless denied with a finite wait
}

// Headers lists the fields that are set, as name, value pairs.
func (f Fields) Headers() [][2]string {
	h := make([][2]string, 0, 3)
	for _, kv := range [][2]string{{FieldPolicy, f.Policy}, {FieldRateLimit, f.RateLimit}, {FieldRetryAfter, f.RetryAfter}} {
		if kv[1] != "" {
			h = append(h, kv)
		}
	}
	return h
}

// makeFields formats the fields for the checks of a request, in buf's
// room if it has enough: one member per check whose rule is enforced (not
// in shadow mode). res is the combined decision; ds[j] is check j's own.
// When the store failed, the failure modes decided and what is left is
// not known: there is no RateLimit field.
func makeFields(buf []byte, checks []Check, ds []sluice.Decision, res sluice.Decision, storeErr error) Fields {
	var f Fields
	retry := fields.RetryAfter(res)
	if retry >= 0 {
		f.RetryAfter = strconv.FormatInt(retry, 10)
	}
	// Both fields in one buffer and one string: RateLimit-Policy, then
	// RateLimit.
	b := buf[:0]
	for j := range checks {
		if !checks[j].Limit.Rule.Shadow() {
			b = fields.Append(b, checks[j].Limit.Policy)
		}
	}
	np := len(b)
	rl := b[np:np] // RateLimit's own list, in b's room when it fits
	for j := range checks {
		if c := &checks[j]; !c.Limit.Rule.Shadow() {
			rl = fields.AppendLimit(rl, c.Limit.SF, ds[j], retry)
		}
	}
	both := string(append(b, rl...))
	f.Policy = both[:np]
	if storeErr == nil {
		f.RateLimit = both[np:]
	}
	return f
}
