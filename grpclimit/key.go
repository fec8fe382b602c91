package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/internal/keys"
)

// KeyFunc returns the key a rule counts a call under: the caller's address,
// an API key from metadata, the method, or a combination. method is the
// full method name, "/package.Service/Method". The Interceptor calls it
// once per call and rule, on the call's goroutine; it must be safe for
// concurrent use.
//
// An error wrapping ErrSkip means the rule does not apply to the call. Any
// other error fails the call: with the error's own gRPC status if it has
// one (status.Error(codes.Unauthenticated, ...)), with
// codes.InvalidArgument naming the rule and what is missing if it wraps
// ErrNoKey, otherwise with codes.Internal. The key functions of this
// package return errors wrapping ErrNoKey when the call lacks what the
// key is made of; Optional turns those into ErrSkip.
type KeyFunc func(ctx context.Context, method string) (string, error)

// ErrNoKey is wrapped by the errors of the key functions of this package
// when the call does not carry the key: no such metadata, no peer IP
// address. Optional turns it into ErrSkip.
var ErrNoKey = errors.New("grpclimit: call has no key")

// ErrSkip, returned (or wrapped) by a KeyFunc, says that its rule does not
// apply to the call: the call is decided by the other rules alone, and
// passes if no rule applies.
var ErrSkip = errors.New("grpclimit: rule does not apply")

// MaxKeyLen is the longest value, in bytes, that Metadata and Method use
// as a key as it is. A longer value, or one that begins with '#', is
// replaced by '#' and the base64url SHA-256 digest of the value (cut to
// 128 bits), so that a client cannot make keys of any size and no raw
// value can pose as a digest.
const MaxKeyLen = keys.MaxLen

// PeerIP keys a call by its peer's IP address: IPv4 addresses as they are
// ("203.0.113.7"), IPv6 addresses by their /64 prefix ("2001:db8:1:2::/64"),
// since one host usually holds a whole /64. An IPv4-mapped IPv6 address
// is its IPv4 address and zones are dropped.
//
// A call without a peer, or whose peer address is not an IP address (a
// Unix socket, an in-memory listener), is an error wrapping ErrNoKey: wrap
// PeerIP in Optional to exempt such calls, or in First with Const to give
// them one shared key.
func PeerIP() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p == nil || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer address", ErrNoKey)
		}
		a, err := peerAddr(p.Addr)
		if err != nil {
			return "", err
		}
		return keys.IP(a), nil
	}
}

// peerAddr is the IP address of a peer, normalised (keys.Addr).
func peerAddr(addr net.Addr) (netip.Addr, error) {
	var a netip.Addr
	switch x := addr.(type) {
	case *net.TCPAddr:
		if x != nil {
			a, _ = netip.AddrFromSlice(x.IP)
		}
	case *net.UDPAddr:
		if x != nil {
			a, _ = netip.AddrFromSlice(x.IP)
		}
	default:
		// Other types (a proxy protocol's, say) are read from their
		// String, which is how net.Addr promises to present itself.
		s := x.String()
		if ap, err := netip.ParseAddrPort(s); err == nil {
			a = ap.Addr()
		} else if b, err := netip.ParseAddr(s); err == nil {
			a = b
		} else {
			return netip.Addr{}, fmt.Errorf("%w: peer address %s %q is not an IP address", ErrNoKey, keys.Clip(x.Network()), keys.Clip(s))
		}
	}
	if !a.IsValid() {
		return netip.Addr{}, fmt.Errorf("%w: peer address %v has no IP", ErrNoKey, addr)
	}
	return keys.Addr(a), nil
}

// Metadata keys a call by the first value of the named incoming metadata
// ("x-tenant"; names are case-insensitive). A missing or empty value is an
// error wrapping ErrNoKey. Long values are hashed (see MaxKeyLen), and so
// are the values of binary ("-bin") metadata always, since they are raw
// bytes. For secrets, use APIKey.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	bin := strings.HasSuffix(name, "-bin")
	return func(ctx context.Context, _ string) (string, error) {
		v := firstValue(ctx, name)
		if v == "" {
			return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
		}
		if bin {
			return keys.Digest(v), nil
		}
		return keys.Bound(v), nil
	}
}

// APIKey keys a call by the secret in the named incoming metadata: the
// token of "authorization: Bearer TOKEN" (the scheme is matched without
// regard to case), or the whole value of any other metadata, such as
// x-api-key. The key is always the digest ('#' and 22 base64url characters
// of SHA-256), so secrets never reach the store, its logs or its metrics.
// A missing or empty secret, "Bearer" with nothing after it included, is
// an error wrapping ErrNoKey.
func APIKey(name string) KeyFunc {
	name = strings.ToLower(name)
	auth := name == "authorization"
	return func(ctx context.Context, _ string) (string, error) {
		k, ok := keys.Secret(firstValue(ctx, name), auth)
		if !ok {
			return "", fmt.Errorf("%w: no API key in the %s metadata", ErrNoKey, name)
		}
		return k, nil
	}
}

// firstValue is the first value of the incoming metadata name, or "".
func firstValue(ctx context.Context, name string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Method keys a call by its full method name, "/package.Service/Method".
// A server with an unknown-service handler hears any name a client
// chooses, so long names are hashed (see MaxKeyLen).
func Method() KeyFunc {
	return func(_ context.Context, method string) (string, error) {
		if method == "" {
			return "", fmt.Errorf("%w: no method name", ErrNoKey)
		}
		return keys.Bound(method), nil
	}
}

// Const keys every call alike: a rule with Const is one limit shared by
// all the calls it covers, such as the capacity of a backend.
func Const(key string) KeyFunc {
	return func(context.Context, string) (string, error) { return key, nil }
}

// Join keys a call by several keys at once, "per method and IP": the parts
// are escaped ('\' and '|' take a backslash) and joined with '|', so that
// distinct tuples never make the same key ("a|b","c" is not "a","b|c").
// The first error of a part is Join's error. Join of no keys is
// Const("").
func Join(parts ...KeyFunc) KeyFunc {
	parts = append([]KeyFunc(nil), parts...)
	return func(ctx context.Context, method string) (string, error) {
		var j keys.Joiner
		for i, k := range parts {
			if k == nil {
				return "", fmt.Errorf("grpclimit: Join: key %d is nil", i)
			}
			v, err := k(ctx, method)
			if err != nil {
				return "", err
			}
			j.Add(v)
		}
		return j.String(), nil
	}
}

// First keys a call by the first of its parts that has a key, "the API
// key, else the peer's IP": a part's error wrapping ErrNoKey or ErrSkip
// moves on to the next; any other error is First's error. When no part
// has a key, First fails with the last part's error.
//
// The key is the part's index, ':' and the part's key: with
// First(APIKey("x-api-key"), PeerIP()), "0:" and the digest of the API
// key, or "1:203.0.113.7" for a call without one. Each part counts in its own namespace, since a
// client that can choose one part's key could otherwise choose another
// part's: with untagged keys, a call sending x-api-key: 203.0.113.7 to
// First(Metadata("x-api-key"), PeerIP()) would spend the quota of the
// keyless callers at 203.0.113.7. An index has no ':', so no two parts
// ever make the same key, whatever their keys contain. This holds for
// parts of the same kind too: a client whose secret two parts accept
// (First(APIKey("authorization"), APIKey("x-api-key"))) has a quota in
// each.
func First(parts ...KeyFunc) KeyFunc {
	parts = append([]KeyFunc(nil), parts...)
	tags := make([]string, len(parts))
	for i := range parts {
		tags[i] = strconv.Itoa(i) + ":"
	}
	return func(ctx context.Context, method string) (string, error) {
		err := fmt.Errorf("%w: First of no keys", ErrNoKey)
		for i, k := range parts {
			if k == nil {
				return "", fmt.Errorf("grpclimit: First: key %d is nil", i)
			}
			var v string
			v, err = k(ctx, method)
			if err == nil {
				return tags[i] + v, nil
			}
			if !errors.Is(err, ErrNoKey) && !errors.Is(err, ErrSkip) {
				return "", err
			}
		}
		return "", err
	}
}

// Optional makes a key whose absence exempts the call from the rule
// instead of failing it: ErrNoKey becomes ErrSkip. With
// WithRule(perKey, Optional(APIKey("x-api-key"))) calls without a key are
// limited by the other rules only.
func Optional(key KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, error) {
		if key == nil {
			return "", errors.New("grpclimit: Optional: key is nil")
		}
		v, err := key(ctx, method)
		return keys.Optional(v, err, ErrNoKey, ErrSkip)
	}
}
