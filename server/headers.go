package server

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// HeaderStyle chooses the rate-limit headers of a response: see
// Settings.ResponseHeaders.
type HeaderStyle int

const (
	// HeadersIETF is the IETF RateLimit and RateLimit-Policy fields for
	// every enforced limit, with Retry-After on a denial.
	HeadersIETF HeaderStyle = iota
	// HeadersEnvoy is envoyproxy/ratelimit's three headers, for the
	// descriptor nearest its limit (a denied one if any): the limit's
	// requests_per_unit, what is left of it, and the seconds until it
	// resets. envoyproxy/ratelimit sends them with
	// LIMIT_RESPONSE_HEADERS_ENABLED=true.
	HeadersEnvoy
	// HeadersNone sends no rate-limit header: envoyproxy/ratelimit's
	// default.
	HeadersNone
)

func (h HeaderStyle) String() string {
	switch h {
	case HeadersIETF:
		return "ietf"
	case HeadersEnvoy:
		return "envoy"
	case HeadersNone:
		return "none"
	}
	return "HeaderStyle(" + strconv.Itoa(int(h)) + ")"
}

// ParseHeaderStyle reads "ietf", "envoy" or "none".
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	for _, h := range []HeaderStyle{HeadersIETF, HeadersEnvoy, HeadersNone} {
		if s == h.String() {
			return h, nil
		}
	}
	return 0, fmt.Errorf("%q: want ietf, envoy or none", s)
}

// HeaderNames name the headers of HeadersEnvoy.
type HeaderNames struct {
	Limit     string // the limit: requests_per_unit
	Remaining string // what is left of it
	Reset     string // whole seconds until it resets
}

// envoyproxy/ratelimit's default header names.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

func (n HeaderNames) withDefaults() HeaderNames {
	for _, f := range []struct {
		v   *string
		def string
	}{{&n.Limit, DefaultLimitHeader}, {&n.Remaining, DefaultRemainingHeader}, {&n.Reset, DefaultResetHeader}} {
		if *f.v == "" {
			*f.v = f.def
		}
	}
	return n
}

func (n HeaderNames) validate() error {
	for _, name := range []string{n.Limit, n.Remaining, n.Reset} {
		if !validHeaderName(name) {
			return fmt.Errorf("%q is not a valid header name", name)
		}
	}
	if n.Limit == n.Remaining || n.Limit == n.Reset || n.Remaining == n.Reset {
		return errors.New("the three header names must differ")
	}
	return nil
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !ok && !isTokenPunct(c) {
			return false
		}
	}
	return true
}

func isTokenPunct(c byte) bool {
	for i := 0; i < len("!#$%&'*+-.^_`|~"); i++ {
		if c == "!#$%&'*+-.^_`|~"[i] {
			return true
		}
	}
	return false
}

// headersOf lists the headers of out in the configured style, as name,
// value pairs. Forward auth (auth) keeps Retry-After on a denial in every
// style.
func (s *Server) headersOf(out *outcome, auth bool) [][2]string {
	var h [][2]string
	switch s.cfg.ResponseHeaders {
	case HeadersIETF:
		return out.Fields.Headers()
	case HeadersEnvoy:
		h = envoyHeaders(out.Statuses, s.cfg.HeaderNames)
	}
	if auth && out.Fields.RetryAfter != "" {
		h = append(h, [2]string{decide.FieldRetryAfter, out.Fields.RetryAfter})
	}
	return h
}

// envoyHeaders are envoyproxy/ratelimit's headers for statuses: of the
// descriptors a limit applied to, the last one over its limit, or else
// the first with the least remaining.
func envoyHeaders(statuses []decide.Status, names HeaderNames) [][2]string {
	pick := -1
	least := int64(math.MaxInt64)
	for i := range statuses {
		st := &statuses[i]
		if st.Limit == nil {
			continue
		}
		left := remainingOf(st.D)
		switch {
		case st.Over:
			pick, least = i, -1 // a denied descriptor wins; the last one
		case left < least:
			pick, least = i, left
		}
	}
	if pick < 0 {
		return nil
	}
	st := &statuses[pick]
	reset := st.D.ResetAfter
	if reset == sluice.Never { // a limit that never refills: its period
		reset = st.Limit.Declared.Limit.Period
	}
	return [][2]string{
		{names.Limit, strconv.FormatUint(uint64(asideOf(st.Limit).current.GetRequestsPerUnit()), 10)},
		{names.Remaining, strconv.FormatInt(remainingOf(st.D), 10)},
		{names.Reset, strconv.FormatInt(ceilSeconds(reset), 10)},
	}
}

// remainingOf is a decision's remaining as RLS reports it, a uint32.
func remainingOf(d sluice.Decision) int64 { return min(max(d.Remaining, 0), math.MaxUint32) }

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// headerKeys maps the names of the headers the server sets on an HTTP
// response to their canonical form, made once: Header.Set would make it
// per response.
func headerKeys(names HeaderNames) map[string]string {
	m := make(map[string]string)
	for _, n := range []string{decide.FieldPolicy, decide.FieldRateLimit, decide.FieldRetryAfter, names.Limit, names.Remaining, names.Reset} {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}

// setHeaders sets the pairs on an HTTP response, as Header.Set does, but
// with their values in one array.
func (s *Server) setHeaders(w http.ResponseWriter, h [][2]string) {
	if len(h) == 0 {
		return
	}
	hdr := w.Header()
	vals := make([]string, len(h))
	for i, kv := range h {
		k, ok := s.headerKeys[kv[0]]
		if !ok {
			k = http.CanonicalHeaderKey(kv[0])
		}
		vals[i] = kv[1]
		hdr[k] = vals[i : i+1 : i+1] // its own capacity: an Add appends elsewhere
	}
}
