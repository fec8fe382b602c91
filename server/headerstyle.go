package server

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/server/internal/protocol"
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

// style is h as the adapters take it.
func (h HeaderStyle) style() protocol.HeaderStyle {
	switch h {
	case HeadersEnvoy:
		return protocol.HeadersEnvoy
	case HeadersNone:
		return protocol.HeadersNone
	}
	return protocol.HeadersIETF
}
