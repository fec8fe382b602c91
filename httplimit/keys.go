package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/internal/keys"
)

// KeyFunc returns the key a rule limits a request by: the client's
// address, a user, an API key, a route. The middleware calls it once per
// request and rule, from the request's goroutine; it must be safe for
// concurrent use.
//
// An error wrapping ErrSkip means the rule does not apply to this request.
// Any other error stops the request (see WithErrorHandler): an error
// wrapping ErrNoKey says that the request lacks what the key is made of,
// and is answered 400 naming it; any other, 500.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is wrapped by the errors of the key functions of this package
// when the request does not carry the key: no such header, a remote
// address that is not an IP. The middleware answers such a request 400,
// with the error's text as the problem's detail; Optional turns it into
// ErrSkip. A KeyFunc of your own may wrap it too.
var ErrNoKey = errors.New("httplimit: request has no key")

// ErrSkip, returned (or wrapped) by a KeyFunc, says that its rule does not
// apply to the request: the request is decided by the other rules alone,
// and passes if no rule applies.
var ErrSkip = errors.New("httplimit: rule does not apply")

// MaxKeyLen is the longest value, in bytes, that Header and Route use as a
// key as it is. A longer value, or one that begins with '#', is replaced by
// '#' and the base64url SHA-256 digest of the value (truncated to 128
// bits), so that a client cannot make keys of any size and no raw value
// can pose as a digest.
const MaxKeyLen = keys.MaxLen

// Header keys a request by the first value of the named header field. A
// missing or empty field is an error wrapping ErrNoKey. Long values are
// hashed (see MaxKeyLen); other values are keys as they are, so for
// secrets use APIKey.
func Header(name string) KeyFunc {
	given, name := name, textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(firstValue(r.Header, name))
		if v == "" {
			return "", fmt.Errorf("%w: no %s header", ErrNoKey, given)
		}
		return keys.Bound(v), nil
	}
}

// APIKey keys a request by the secret in the named header: the token of
// "Authorization: Bearer TOKEN" (the scheme is matched without regard to
// case), or the whole value of any other header, such as X-API-Key, or of
// an Authorization field of another scheme. The key is always the digest
// ('#' and 22 base64url characters of SHA-256), so secrets never reach the
// store, its logs or its metrics, and keys have a fixed size. A missing or
// empty secret, "Bearer" with nothing after it included, is an error
// wrapping ErrNoKey.
func APIKey(header string) KeyFunc {
	given, header := header, textproto.CanonicalMIMEHeaderKey(header)
	auth := header == "Authorization"
	return func(r *http.Request) (string, error) {
		k, ok := keys.Secret(firstValue(r.Header, header), auth)
		if !ok {
			return "", fmt.Errorf("%w: no API key in the %s header", ErrNoKey, given)
		}
		return k, nil
	}
}

// Route keys a request by its method and route: "GET /items/{id}". The
// route is the pattern http.ServeMux matched (Request.Pattern), which is
// known only when the middleware wraps the handler registered on the mux,
// not the mux itself; otherwise it is the URL's path, which the client
// chooses: long paths are hashed (see MaxKeyLen). The method is the
// pattern's when it names one, so that a HEAD counts as the GET it is
// served as; else the request's, any but the standard ones (GET, POST,
// PUT...) keyed as "OTHER", since a server accepts any token as a method
// and a client could otherwise make a new key, and a new limit, with each.
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		m, p := "", r.Pattern
		if p == "" {
			if r.URL == nil {
				return "", fmt.Errorf("%w: request has no URL", ErrNoKey)
			}
			p = r.URL.Path
		} else if i := strings.IndexAny(p, " \t"); i >= 0 && !strings.Contains(p[:i], "/") {
			m, p = p[:i], strings.TrimLeft(p[i:], " \t") // "GET /x" -> "GET", "/x"
		}
		if m == "" {
			m = stdMethod(r.Method)
		}
		return keys.Bound(m + " " + p), nil
	}
}

// stdMethod returns m when it is one of HTTP's methods, else "OTHER".
func stdMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// Const keys every request alike: a rule with Const is one limit shared
// by all clients, such as the capacity of a backend.
func Const(key string) KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// Join keys a request by several keys at once, "per user and route": the
// parts are escaped ('\' and '|' take a backslash) and joined with '|', so
// that distinct tuples never make the same key ("a|b","c" is not
// "a","b|c"). The first error of a part is Join's error. Join of no keys
// is Const("").
func Join(parts ...KeyFunc) KeyFunc {
	parts = append([]KeyFunc(nil), parts...)
	return func(r *http.Request) (string, error) {
		var j keys.Joiner
		for i, k := range parts {
			if k == nil {
				return "", fmt.Errorf("httplimit: Join: key %d is nil", i)
			}
			v, err := k(r)
			if err != nil {
				return "", err
			}
			j.Add(v)
		}
		return j.String(), nil
	}
}

// Optional makes a key whose absence exempts the request from the rule
// instead of stopping it: ErrNoKey becomes ErrSkip. With
// WithRule(perKey, Optional(APIKey("X-API-Key"))) requests without a key
// are limited by the other rules only.
func Optional(key KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		if key == nil {
			return "", errors.New("httplimit: Optional: key is nil")
		}
		v, err := key(r)
		return keys.Optional(v, err, ErrNoKey, ErrSkip)
	}
}

// firstValue is Header.Get without canonicalising the name again.
func firstValue(h http.Header, canonical string) string {
	if vs := h[canonical]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
