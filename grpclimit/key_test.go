package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/grpclimit"
)

type strAddr struct{ network, s string }

func (a strAddr) Network() string { return a.network }
func (a strAddr) String() string  { return a.s }

func withPeer(a net.Addr) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context { return peer.NewContext(ctx, &peer.Peer{Addr: a}) }
}

func tcp(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 4242} }

// peerCases are the peers a call can have; key "" means PeerIP has none.
var peerCases = []struct {
	name string
	ctx  func(context.Context) context.Context
	key  string
}{
	{"IPv4", withPeer(tcp("203.0.113.7")), "203.0.113.7"},
	{"IPv4-mapped IPv6", withPeer(tcp("::ffff:203.0.113.7")), "203.0.113.7"},
	{"IPv6", withPeer(tcp("2001:db8:1:2:3:4:5:6")), "2001:db8:1:2::/64"},
	{"IPv6 same /64", withPeer(tcp("2001:db8:1:2:ffff::1")), "2001:db8:1:2::/64"},
	{"IPv6 next /64", withPeer(tcp("2001:db8:1:3::1")), "2001:db8:1:3::/64"},
	{"IPv6 with zone", withPeer(&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}), "fe80::/64"},
	{"UDP", withPeer(&net.UDPAddr{IP: net.ParseIP("198.51.100.1")}), "198.51.100.1"},
	{"other type, ip:port", withPeer(strAddr{"proxy", "[2001:db8::9]:80"}), "2001:db8::/64"},
	{"other type, bare ip", withPeer(strAddr{"proxy", "192.0.2.1"}), "192.0.2.1"},
	{"no peer", func(ctx context.Context) context.Context { return ctx }, ""},
	{"nil peer", func(ctx context.Context) context.Context { return peer.NewContext(ctx, nil) }, ""},
	{"nil address", withPeer(nil), ""},
	{"typed nil TCP address", withPeer((*net.TCPAddr)(nil)), ""},
	{"TCP address without IP", withPeer(&net.TCPAddr{Port: 1}), ""},
	{"garbage TCP IP", withPeer(&net.TCPAddr{IP: net.IP{1, 2, 3}}), ""},
	{"unix socket", withPeer(&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}), ""},
	{"huge garbage", withPeer(strAddr{"x", strings.Repeat("\xff", 1<<16)}), ""},
}

func TestPeerIP(t *testing.T) {
	key := grpclimit.PeerIP()
	for _, tc := range peerCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := key(tc.ctx(t.Context()), "/a.B/C")
			if tc.key == "" {
				if !errors.Is(err, grpclimit.ErrNoKey) {
					t.Fatalf("PeerIP = %q, %v; want ErrNoKey", got, err)
				}
				if len(err.Error()) > 400 {
					t.Fatalf("error of %d bytes: the address is not clipped", len(err.Error()))
				}
				return
			}
			if err != nil || got != tc.key {
				t.Fatalf("PeerIP = %q, %v; want %q", got, err, tc.key)
			}
		})
	}
}

func incoming(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

func TestKeyFuncs(t *testing.T) {
	long := strings.Repeat("x", grpclimit.MaxKeyLen+1)
	fail := func(context.Context, string) (string, error) { return "", status.Error(codes.Unauthenticated, "who?") }
	for _, tc := range []struct {
		name    string
		key     grpclimit.KeyFunc
		ctx     context.Context
		method  string
		want    string // ending in "#": that prefix and any digest
		wantErr error
	}{
		{"metadata", grpclimit.Metadata("X-Tenant"), incoming("x-tenant", "acme"), "", "acme", nil},
		{"metadata first value", grpclimit.Metadata("x-tenant"), incoming("x-tenant", "a", "x-tenant", "b"), "", "a", nil},
		{"metadata missing", grpclimit.Metadata("x-tenant"), incoming(), "", "", grpclimit.ErrNoKey},
		{"metadata no context", grpclimit.Metadata("x-tenant"), context.Background(), "", "", grpclimit.ErrNoKey},
		{"metadata empty", grpclimit.Metadata("x-tenant"), incoming("x-tenant", ""), "", "", grpclimit.ErrNoKey},
		{"metadata long", grpclimit.Metadata("x-tenant"), incoming("x-tenant", long), "", "#", nil},
		{"metadata lookalike", grpclimit.Metadata("x-tenant"), incoming("x-tenant", "#abc"), "", "#", nil},
		{"metadata binary", grpclimit.Metadata("x-id-bin"), incoming("x-id-bin", "\x00"), "", "#", nil},
		{"api key bearer", grpclimit.APIKey("Authorization"), incoming("authorization", "bearer s3cret"), "", "#", nil},
		{"api key blank bearer", grpclimit.APIKey("authorization"), incoming("authorization", "Bearer   "), "", "", grpclimit.ErrNoKey},
		{"api key bare bearer", grpclimit.APIKey("authorization"), incoming("authorization", "bearer"), "", "", grpclimit.ErrNoKey},
		{"api key other scheme", grpclimit.APIKey("authorization"), incoming("authorization", "Basic Zm9v"), "", "#", nil},
		{"method", grpclimit.Method(), nil, "/a.B/C", "/a.B/C", nil},
		{"method long", grpclimit.Method(), nil, "/" + long, "#", nil},
		{"method empty", grpclimit.Method(), nil, "", "", grpclimit.ErrNoKey},
		{"const", grpclimit.Const("k"), nil, "", "k", nil},
		{"join", grpclimit.Join(grpclimit.Const("a|b"), grpclimit.Const(`c\`)), nil, "", `a\|b|c\\`, nil},
		{"join none", grpclimit.Join(), nil, "", "", nil},
		{"join failing part", grpclimit.Join(grpclimit.Const("a"), grpclimit.Metadata("x")), incoming(), "", "", grpclimit.ErrNoKey},
		{"join nil part", grpclimit.Join(nil), nil, "", "", errAny},
		{"first falls back", grpclimit.First(grpclimit.Metadata("x"), grpclimit.Optional(grpclimit.Metadata("y")), grpclimit.Const("z")), incoming(), "", "2:z", nil},
		{"first takes first", grpclimit.First(grpclimit.Metadata("x"), grpclimit.Const("z")), incoming("x", "1"), "", "0:1", nil},
		{"first tags a digest", grpclimit.First(grpclimit.APIKey("x-api-key"), grpclimit.PeerIP()), incoming("x-api-key", "203.0.113.7"), "", "0:#", nil},
		{"first none", grpclimit.First(grpclimit.Metadata("x")), incoming(), "", "", grpclimit.ErrNoKey},
		{"first of nothing", grpclimit.First(), nil, "", "", grpclimit.ErrNoKey},
		{"first stops at other errors", grpclimit.First(fail, grpclimit.Const("z")), nil, "", "", errAny},
		{"optional", grpclimit.Optional(grpclimit.Metadata("x")), incoming(), "", "", grpclimit.ErrSkip},
		{"optional nil", grpclimit.Optional(nil), nil, "", "", errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got, err := tc.key(ctx, tc.method)
			switch {
			case tc.wantErr == errAny:
				if err == nil {
					t.Fatalf("key = %q, want an error", got)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("key = %q, %v; want %v", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("key: %v", err)
			case strings.HasSuffix(tc.want, "#"):
				tag := strings.TrimSuffix(tc.want, "#")
				if d, ok := strings.CutPrefix(got, tag); !ok || len(d) != 23 || d[0] != '#' {
					t.Fatalf("key = %q, want %q and a digest", got, tag)
				}
			case got != tc.want:
				t.Fatalf("key = %q, want %q", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

// FuzzMetadata: any metadata value makes a bounded key, and nothing
// panics.
func FuzzMetadata(f *testing.F) {
	f.Add("acme")
	f.Add("#x")
	f.Add(strings.Repeat("\xff", 100))
	key := grpclimit.Metadata("x-tenant")
	f.Fuzz(func(t *testing.T, v string) {
		k, err := key(incoming("x-tenant", v), "")
		if v == "" {
			if !errors.Is(err, grpclimit.ErrNoKey) {
				t.Fatalf("empty value: %q, %v", k, err)
			}
			return
		}
		if err != nil || len(k) > grpclimit.MaxKeyLen || k == "" {
			t.Fatalf("Metadata(%q) = %q, %v", v, k, err)
		}
	})
}

// chosen is the context value that picks which part of pickFirst has a key,
// and what the key is.
type chosen struct {
	part int
	key  string
}

type chosenKey struct{}

// pickFirst is First over n parts, of which only the one the context
// chooses has a key; the others have none, half by ErrNoKey and half by
// ErrSkip.
func pickFirst(n int) grpclimit.KeyFunc {
	parts := make([]grpclimit.KeyFunc, n)
	for i := range parts {
		parts[i] = func(ctx context.Context, _ string) (string, error) {
			if c, _ := ctx.Value(chosenKey{}).(chosen); c.part == i {
				return c.key, nil
			}
			if i%2 == 1 {
				return "", grpclimit.ErrSkip
			}
			return "", grpclimit.ErrNoKey
		}
	}
	return grpclimit.First(parts...)
}

func firstKey(t *testing.T, key grpclimit.KeyFunc, part int, v string) string {
	t.Helper()
	k, err := key(context.WithValue(context.Background(), chosenKey{}, chosen{part, v}), "/a.B/C")
	if err != nil {
		t.Fatalf("First with part %d = %q: %v", part, v, err)
	}
	return k
}

// TestFirstInjective: no two parts, and no two keys of one part, make the
// same key, whatever the keys contain (tags, digests, separators), and
// the tag adds only the index and ':'.
func TestFirstInjective(t *testing.T) {
	var strs []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		strs = append(strs, prefix)
		if n == 0 {
			return
		}
		for _, c := range []string{"0", "1", ":", "#"} {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3) // 85 strings, "" and "1:0" and "#:" among them
	// Two-digit indices: part 1 with "0:x" against part 10 with ":x".
	const n = 12
	key := pickFirst(n)
	seen := map[string]chosen{}
	for i := range n {
		for _, v := range strs {
			k := firstKey(t, key, i, v)
			if prev, ok := seen[k]; ok {
				t.Fatalf("part %d with %q and part %d with %q both make %q", i, v, prev.part, prev.key, k)
			}
			seen[k] = chosen{i, v}
			if extra := len(k) - len(v); extra != len(strconv.Itoa(i))+1 {
				t.Fatalf("part %d with %q makes %q: %d bytes longer", i, v, k, extra)
			}
		}
	}
}

// FuzzFirst: two choices make the same key only if they are the same
// choice.
func FuzzFirst(f *testing.F) {
	f.Add(uint8(1), "0:x", uint8(10), ":x")
	f.Add(uint8(0), "1:203.0.113.7", uint8(1), "203.0.113.7")
	f.Add(uint8(0), "", uint8(1), "")
	const n = 12
	key := pickFirst(n)
	f.Fuzz(func(t *testing.T, i uint8, v string, j uint8, w string) {
		a, b := int(i%n), int(j%n)
		ka, kb := firstKey(t, key, a, v), firstKey(t, key, b, w)
		if (ka == kb) != (a == b && v == w) {
			t.Fatalf("part %d with %q makes %q, part %d with %q makes %q", a, v, ka, b, w, kb)
		}
	})
}
