package httpclient

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// maxFieldLen bounds the part of a header value that is parsed, so that a
// hostile server costs a fixed amount of work.
const maxFieldLen = 4096

// parseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3) at now:
// delta-seconds, or an HTTP-date, which counts from now and is 0 when it
// has passed. Delta-seconds too large for a Duration are sluice.Never.
// ok is false for an absent or malformed value: negative, fractional,
// garbage.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > maxFieldLen {
		return 0, false
	}
	if isDigits(v) {
		return seconds(v), true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(date.Sub(now), 0), true
}

// seconds is the duration of a string of decimal digits, in seconds, or
// sluice.Never when it does not fit.
func seconds(digits string) time.Duration {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(math.MaxInt64/time.Second) {
		return sluice.Never
	}
	return time.Duration(n) * time.Second
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// quotaSpent reads RateLimit fields (draft-ietf-httpapi-ratelimit-headers:
// `"name";r=0;t=17, "other";r=5;t=3`) and returns the longest t, in
// seconds, of a member with no units left (r=0). ok is false when no
// member is spent. Members without r or t, or with malformed parameters,
// are ignored; a t that does not fit is sluice.Never.
func quotaSpent(values []string) (d time.Duration, ok bool) {
	for _, v := range values {
		if len(v) > maxFieldLen {
			v = v[:maxFieldLen]
		}
		for len(v) > 0 {
			var member string
			member, v = nextMember(v)
			r, t := memberParams(member)
			if r == "0" && isDigits(t) {
				d, ok = max(d, seconds(t)), true
			}
		}
	}
	return d, ok
}

// nextMember splits the first list member off s: up to the first comma
// outside a quoted string.
func nextMember(s string) (member, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++ // the escaped byte
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// memberParams returns the raw values of the r and t parameters of a list
// member `"name";r=0;t=17`; "" for one that is absent.
func memberParams(m string) (r, t string) {
	// Skip the item: a quoted string (whose ';' are not separators) or a
	// token.
	m = strings.TrimSpace(m)
	if strings.HasPrefix(m, `"`) {
		i := 1
		for ; i < len(m) && m[i] != '"'; i++ {
			if m[i] == '\\' {
				i++
			}
		}
		m = m[min(i+1, len(m)):]
	} else if i := strings.IndexByte(m, ';'); i >= 0 {
		m = m[i:]
	} else {
		return "", ""
	}
	for _, p := range strings.Split(m, ";") {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch k {
		case "r":
			r = val
		case "t":
			t = val
		}
	}
	return r, t
}
