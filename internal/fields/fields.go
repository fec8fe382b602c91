// Package fields formats the values of the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers), which package httplimit sends as
// HTTP header fields and package grpclimit as response header metadata,
// so that both say the same of the same decision:
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-ip";r=0;t=1, "daily";r=9957;t=1
//	Retry-After: 1
//
// The values are RFC 8941 Lists. A caller makes each rule's name and
// RateLimit-Policy member once, with Policy, and for each decided request
// appends one RateLimit member per enforced rule with AppendLimit, under
// the request's RetryAfter. Where a value goes, and which rules are
// enforced, is the caller's.
//
// It also writes the bodies that go with them, so that a denial reads the
// same from httplimit and from sluice serve: AppendDenied, the RFC 9457
// problem of type quota-exceeded, and AppendProblem, a 400 naming what a
// request lacks.
package fields

import (
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// MaxInteger is the largest Integer of RFC 8941 (15 digits). Larger
// numbers are written as MaxInteger, so that a field never fails to parse:
// quotas beyond 10^15 are not meaningful to a client.
const MaxInteger = 999_999_999_999_999

// String returns s as an RFC 8941 sf-string: in quotes, with '"' and '\'
// escaped. Only printable ASCII can be an sf-string; anything else is an
// error rather than a silent change that could make two names one.
func String(s string) (string, error) {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("byte %#02x at %d is not printable ASCII, which RFC 8941 strings require", c, i)
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"')), nil
}

// Seconds is d in whole seconds, rounded up, never negative: the
// delay-seconds of Retry-After and of the RateLimit fields, which never
// under-report a wait.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int64(s)
}

// integer clamps n to the range of an sf-integer.
func integer(n int64) int64 { return min(max(n, 0), MaxInteger) }

// Policy returns what the fields say of a rule, made once per rule: its
// name as an sf-string, and its RateLimit-Policy list member. The member
// is the name, the quota q (Rule.Quota) and the window w in seconds over
// which q units are granted. For the windows, w is the Period. For the
// buckets and GCRA, whose quota is the burst, w is the time to refill the
// whole burst, Burst·Period/Rate, so that q/w is the sustained rate and a
// client sending q units every w seconds is never denied; it equals the
// Period when Burst is Rate. w is rounded up, which only understates the
// rate, and left out when the quota never refills (Rate 0). A name that
// is not printable ASCII is an error.
func Policy(r *sluice.Rule) (name, member string, err error) {
	name, err = String(r.Name)
	if err != nil {
		return "", "", err
	}
	q := r.Quota()
	b := []byte(name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, integer(q), 10)
	w := refillSeconds(q, r.Limit.Rate, r.Limit.Period)
	if info, ok := r.Algorithm.Info(); ok && !info.Bucket {
		w = Seconds(r.Limit.Period)
	}
	if w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, integer(w), 10)
	}
	return name, string(b), nil
}

// refillSeconds is ⌈q·period/rate⌉ in seconds, at least 1, or 0 when rate
// is 0. q·period can overflow an int64, hence big: this runs once per rule.
func refillSeconds(q, rate int64, period time.Duration) int64 {
	if rate <= 0 {
		return 0
	}
	num := new(big.Int).Mul(big.NewInt(q), big.NewInt(int64(period)))
	den := new(big.Int).Mul(big.NewInt(rate), big.NewInt(int64(time.Second)))
	s, m := new(big.Int).QuoRem(num, den, new(big.Int))
	if m.Sign() != 0 {
		s.Add(s, big.NewInt(1))
	}
	if !s.IsInt64() || s.Int64() > MaxInteger {
		return MaxInteger
	}
	return max(s.Int64(), 1)
}

// RetryAfter is the Retry-After of a combined decision (sluice.Result's
// Decision): its RetryAfter in seconds, rounded up, or -1 when there is
// none to send, because the request is allowed or can never pass
// (RetryAfter is sluice.Never), when no wait would help.
func RetryAfter(d sluice.Decision) int64 {
	if d.Allowed || d.RetryAfter == sluice.Never {
		return -1
	}
	return Seconds(d.RetryAfter)
}

// Append appends member to the list: after ", " unless the list is empty.
func Append(list []byte, member string) []byte {
	if len(list) > 0 {
		list = append(list, ", "...)
	}
	return append(list, member...)
}

// AppendLimit appends to the list a rule's RateLimit member: name (an
// sf-string, from Policy), r the units left (d.Remaining) and t the
// seconds until the rule is back to idle (d.ResetAfter), rounded up, or no
// t when that is never. retry is the request's RetryAfter (-1 for none):
// on a denial t is capped at it, as the draft asks that Retry-After not
// end before the effective window, and a shorter window with the same r
// is still true.
func AppendLimit(list []byte, name string, d sluice.Decision, retry int64) []byte {
	list = Append(list, name)
	list = append(list, ";r="...)
	list = strconv.AppendInt(list, integer(d.Remaining), 10)
	t := Seconds(d.ResetAfter)
	if d.ResetAfter == sluice.Never {
		t = -1
	}
	if retry >= 0 && (t < 0 || t > retry) {
		t = retry
	}
	if t >= 0 {
		list = append(list, ";t="...)
		list = strconv.AppendInt(list, integer(t), 10)
	}
	return list
}
