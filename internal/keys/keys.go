// Package keys shapes the keys that package httplimit counts requests by
// and package grpclimit counts calls by, so that both key alike: values a
// client chooses are bounded by a digest (Bound), secrets are always
// hashed (Secret), tuples are joined without collisions (Joiner), and
// addresses are grouped (IP: IPv6 by /64). What differs between the two
// stays in them: where a value is read from, their KeyFunc types and
// their errors.
package keys

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// MaxLen is the longest value, in bytes, that Bound keeps as it is.
const MaxLen = 64

// Bound returns s, or its Digest when s is longer than MaxLen or begins
// with '#', so that a client cannot make keys of any size and no raw value
// can pose as a digest.
func Bound(s string) string {
	if len(s) <= MaxLen && !strings.HasPrefix(s, "#") {
		return s
	}
	return Digest(s)
}

// Digest is '#' and the base64url SHA-256 of s, cut to 128 bits: 23 bytes.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	var out [23]byte
	out[0] = '#'
	base64.RawURLEncoding.Encode(out[1:], sum[:16])
	return string(out[:])
}

// Secret returns the key of an API key: the Digest of value, trimmed, so
// that secrets never reach a store, its logs or its metrics. When bearer
// is set (value is an Authorization field's), the token of
// "Bearer TOKEN" is the secret, the scheme matched without regard to case
// and the spaces around the token dropped; other schemes are keyed by the
// whole value. ok is false when there is no secret: an empty value, or
// "Bearer" with nothing after it.
func Secret(value string, bearer bool) (key string, ok bool) {
	v := strings.TrimSpace(value)
	if bearer {
		if scheme, creds := authParts(v); strings.EqualFold(scheme, "Bearer") {
			v = creds
		}
	}
	if v == "" {
		return "", false
	}
	return Digest(v), true
}

// Authorization returns an Authorization (or Proxy-Authorization) field's
// value in one spelling for the ways a client may write the same
// credentials: the scheme, whose case does not count (RFC 9110 §11.1),
// with its first letter in upper case and the others in lower ("Bearer",
// "Basic"), then one space and the credentials, each run of spaces in
// them one space. "bEARER   T0K " is "Bearer T0K"; the credentials' own
// case is kept, as it counts.
func Authorization(value string) string {
	scheme, creds := authParts(value)
	var b strings.Builder
	b.Grow(len(scheme) + 1 + len(creds))
	for i := 0; i < len(scheme); i++ {
		c := scheme[i]
		switch {
		case i == 0 && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case i > 0 && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	if creds == "" {
		return b.String()
	}
	b.WriteByte(' ')
	space := false
	for i := 0; i < len(creds); i++ {
		if creds[i] == ' ' {
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteByte(creds[i])
	}
	return b.String()
}

// authParts splits an Authorization value, trimmed, into its scheme and
// its credentials, trimmed, at the first space (RFC 9110's separator: a
// tab is part of the scheme).
func authParts(value string) (scheme, credentials string) {
	scheme, creds, _ := strings.Cut(strings.TrimSpace(value), " ")
	return scheme, strings.TrimSpace(creds)
}

// Joiner makes the key of a tuple, "per user and route": the parts are
// escaped ('\' and '|' take a backslash) and joined with '|', so that
// distinct tuples never make the same key ("a|b","c" is not "a","b|c").
// The zero value is the empty tuple, whose key is "".
type Joiner struct {
	b strings.Builder
	n int
}

// Add appends part to the tuple.
func (j *Joiner) Add(part string) {
	if j.n > 0 {
		j.b.WriteByte('|')
	}
	j.n++
	if !strings.ContainsAny(part, `\|`) {
		j.b.WriteString(part)
		return
	}
	for i := 0; i < len(part); i++ {
		if c := part[i]; c == '\\' || c == '|' {
			j.b.WriteByte('\\')
		}
		j.b.WriteByte(part[i])
	}
}

// String is the key of the tuple.
func (j *Joiner) String() string { return j.b.String() }

// Optional is the result of an optional key, one whose absence exempts
// the request from its rule: a key error wrapping noKey becomes one
// wrapping skip (and still noKey); anything else is as it was.
func Optional(key string, err, noKey, skip error) (string, error) {
	if errors.Is(err, noKey) {
		return "", fmt.Errorf("%w: %w", skip, err)
	}
	return key, err
}

// Clip shortens s, quoted in an error message, to 64 bytes: what a
// client sends, or a custom net.Addr says, may be of any size.
func Clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
