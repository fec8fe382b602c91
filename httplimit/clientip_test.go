package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

func request(remote string, xff ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	return r
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8:ffff::/48"),
		netip.MustParsePrefix("192.168.1.1/32"),
	}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string
		want    string // "" for an ErrNoKey error
	}{
		{"peer", nil, "203.0.113.7:1234", nil, "203.0.113.7"},
		{"peer without port", nil, "203.0.113.7", nil, "203.0.113.7"},
		{"no trust, header ignored", nil, "203.0.113.7:1", []string{"198.51.100.1"}, "203.0.113.7"},
		{"untrusted peer, header ignored", trusted, "203.0.113.7:1", []string{"198.51.100.1"}, "203.0.113.7"},
		{"trusted peer", trusted, "10.1.2.3:1", []string{"198.51.100.1"}, "198.51.100.1"},
		{"trusted peer, no header", trusted, "10.1.2.3:1", nil, "10.1.2.3"},
		{"right-most untrusted", trusted, "10.1.2.3:1", []string{"1.1.1.1, 198.51.100.1, 10.9.9.9, 192.168.1.1"}, "198.51.100.1"},
		{"several fields are one list", trusted, "10.1.2.3:1", []string{"1.1.1.1, 198.51.100.1", "10.9.9.9"}, "198.51.100.1"},
		{"the last field is the right-most", trusted, "10.1.2.3:1", []string{"10.9.9.9", "198.51.100.1"}, "198.51.100.1"},
		{"all trusted: the left-most", trusted, "10.1.2.3:1", []string{"10.0.0.9, 192.168.1.1"}, "10.0.0.9"},
		{"garbage stops at the last trusted", trusted, "10.1.2.3:1", []string{"1.1.1.1, bogus, 10.0.0.9"}, "10.0.0.9"},
		{"garbage first: the peer", trusted, "10.1.2.3:1", []string{"1.1.1.1, unknown"}, "10.1.2.3"},
		{"empty elements skipped", trusted, "10.1.2.3:1", []string{"198.51.100.1,, ,\t,"}, "198.51.100.1"},
		{"with port", trusted, "10.1.2.3:1", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"IPv6 bracketed", trusted, "10.1.2.3:1", []string{"[2001:db8:1:2::99]"}, "2001:db8:1:2::/64"},
		{"IPv6 bracketed with port", trusted, "10.1.2.3:1", []string{"[2001:db8:1:2::99]:443"}, "2001:db8:1:2::/64"},
		{"IPv6 peer", nil, "[2001:db8:1:2:3:4:5:6]:80", nil, "2001:db8:1:2::/64"},
		{"IPv6 trusted proxy", trusted, "[2001:db8:ffff:1::1]:80", []string{"2001:db8:1:2::1, 2001:db8:ffff::2"}, "2001:db8:1:2::/64"},
		{"IPv4-mapped peer", nil, "[::ffff:203.0.113.7]:80", nil, "203.0.113.7"},
		{"IPv4-mapped trusted peer", trusted, "[::ffff:10.0.0.1]:80", []string{"203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped entry", trusted, "10.0.0.1:80", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted prefix", []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, "10.0.0.1:80", []string{"203.0.113.7"}, "203.0.113.7"},
		{"zone", nil, "[fe80::1%eth0]:80", nil, "fe80::/64"},
		{"unmasked trusted prefix", []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}, "10.200.0.1:1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"too many hops", []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, "10.0.0.1:1", []string{"9.9.9.9, " + strings.Repeat("1.2.3.4, ", 40) + "5.5.5.5"}, "1.2.3.4"},
		{"unix socket", nil, "@", nil, ""},
		{"empty remote", nil, "", nil, ""},
		{"hostname remote", nil, "localhost:80", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httplimit.ClientIP(tt.trusted...)(request(tt.remote, tt.xff...))
			if tt.want == "" {
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Fatalf("ClientIP = %q, %v; want ErrNoKey", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ClientIP = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestClientIPInvalidPrefix(t *testing.T) {
	k := httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"), netip.Prefix{})
	if got, err := k(request("10.0.0.1:1")); err == nil || !strings.Contains(err.Error(), "prefix 1") {
		t.Fatalf("ClientIP with an invalid prefix = %q, %v; want an error naming it", got, err)
	}
}

// FuzzClientIP holds ClientIP to its promises on any input: no panic; a
// key that is an IPv4 address or an IPv6 /64; and, behind a trusted
// proxy that appends the client's address, whatever the client wrote to
// the left cannot change its key.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 5.6.7.8", uint32(0xc6336409), false)
	f.Add("[::ffff:10.0.0.1]:80", "[2001:db8::1]:80,,", uint32(0x01020304), true)
	f.Add("garbage", "10.0.0.2, ::ffff:1.1.1.1%eth0", uint32(0x0a000001), false)
	f.Add("[fe80::1%lo]:1", strings.Repeat("10.0.0.1,", 50), uint32(1), true)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	key := httplimit.ClientIP(trusted...)
	f.Fuzz(func(t *testing.T, remote, forged string, client uint32, v6 bool) {
		got, err := key(request(remote, forged))
		if err != nil {
			if !errors.Is(err, httplimit.ErrNoKey) {
				t.Fatalf("ClientIP(%q, %q): %v, want ErrNoKey", remote, forged, err)
			}
		} else if !validKey(got) {
			t.Fatalf("ClientIP(%q, %q) = %q, not an address key", remote, forged, got)
		}

		// The client, untrusted, reaches us through a trusted proxy.
		var a netip.Addr
		if v6 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(client >> 24), byte(client >> 16), byte(client >> 8), byte(client), 15: 7})
		} else {
			a = netip.AddrFrom4([4]byte{byte(client >> 24), byte(client >> 16), byte(client >> 8), byte(client)})
			if a.IsUnspecified() || trusted[0].Contains(a) {
				a = netip.MustParseAddr("198.51.100.9")
			}
		}
		want, err := key(request(a.String() + ":1"))
		if err != nil {
			t.Fatal(err)
		}
		// The proxy appends a field line, or to the last line.
		r := request("10.0.0.1:443", forged)
		r.Header.Add("X-Forwarded-For", a.String())
		if got, err := key(r); err != nil || got != want {
			t.Fatalf("client %v forging %q behind a proxy: key %q, %v; want %q", a, forged, got, err, want)
		}
		r = request("10.0.0.1:443", forged+", "+a.String())
		if got, err := key(r); err != nil || got != want {
			t.Fatalf("client %v forging %q behind a proxy, one line: key %q, %v; want %q", a, forged, got, err, want)
		}
	})
}

// validKey reports whether k is an IPv4 address or an IPv6 /64 prefix in
// canonical form.
func validKey(k string) bool {
	if a, err := netip.ParseAddr(k); err == nil {
		return a.Is4() && a.String() == k
	}
	p, err := netip.ParsePrefix(k)
	return err == nil && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() == 64 && p.Masked() == p && p.String() == k
}

// A client behind trusted proxies cannot change its key with a forged
// X-Forwarded-For, nor spend another client's limit.
func TestSpoofedForwardedFor(t *testing.T) {
	rule := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerHour(2)}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP(proxies...)))
	const proxy, victim, attacker = "10.0.0.1:4000", "203.0.113.7", "198.51.100.9"

	// The attacker, through the proxy, which appends its address, claims
	// to be the victim, a proxy, garbage, and many things at once.
	forged := []string{
		victim,
		"10.0.0.5",
		"not-an-ip",
		victim + ", 10.0.0.2",
		strings.Repeat(victim+",", 100) + "10.0.0.3",
		"fd00::1",
		"[" + victim + "]:80",
	}
	for i, f := range forged {
		w := h.send(proxy, "X-Forwarded-For", f+", "+attacker)
		wantCode := 200
		if i >= 2 {
			wantCode = 429
		}
		if w.Code != wantCode {
			t.Fatalf("forged %q: %d, want %d", f, w.Code, wantCode)
		}
		checks, _ := h.last()
		if checks[0].Key != attacker {
			t.Fatalf("forged %q: key %q, want the attacker's %q", f, checks[0].Key, attacker)
		}
	}
	// Straight to the server, X-Forwarded-For is not read at all.
	for _, f := range forged {
		h.send(attacker+":5555", "X-Forwarded-For", f)
		if checks, _ := h.last(); checks[0].Key != attacker {
			t.Fatalf("direct, forged %q: key %q", f, checks[0].Key)
		}
	}
	// The victim still has its whole limit, through the proxy or not.
	for _, w := range []*httptest.ResponseRecorder{
		h.send(proxy, "X-Forwarded-For", victim),
		h.send(victim + ":1"),
	} {
		if w.Code != 200 {
			t.Fatalf("victim denied: %d %q", w.Code, w.Header().Get("RateLimit"))
		}
	}
}

func TestSharedKeys(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name string
		a, b [2]string // remote, X-Forwarded-For
		same bool
	}{
		{"IPv6 neighbours in one /64", [2]string{"[2001:db8:1:2::1]:80", ""}, [2]string{"[2001:db8:1:2:ffff:ffff:ffff:fffe]:80", ""}, true},
		{"IPv6 in the next /64", [2]string{"[2001:db8:1:2::1]:80", ""}, [2]string{"[2001:db8:1:3::1]:80", ""}, false},
		{"IPv6 /64 via a proxy", [2]string{"10.0.0.1:1", "2001:db8:1:2::1"}, [2]string{"[2001:db8:1:2::7]:9", ""}, true},
		{"IPv4-mapped is IPv4", [2]string{"[::ffff:203.0.113.7]:80", ""}, [2]string{"203.0.113.7:9", ""}, true},
		{"IPv4-mapped via a proxy", [2]string{"[::ffff:10.0.0.1]:1", "::ffff:203.0.113.7"}, [2]string{"203.0.113.7:9", ""}, true},
		{"zones are dropped", [2]string{"[fe80::1%eth0]:80", ""}, [2]string{"[fe80::2%eth1]:80", ""}, true},
		{"IPv4 neighbours", [2]string{"203.0.113.7:1", ""}, [2]string{"203.0.113.8:1", ""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(1)}
			h := newHarness(t, httplimit.WithRule(rule, httplimit.ClientIP(proxies...)))
			req := func(c [2]string) int {
				var hdr []string
				if c[1] != "" {
					hdr = []string{"X-Forwarded-For", c[1]}
				}
				return h.send(c[0], hdr...).Code
			}
			if code := req(tt.a); code != 200 {
				t.Fatalf("first: %d", code)
			}
			want := 200
			if tt.same {
				want = 429
			}
			if code := req(tt.b); code != want {
				t.Fatalf("second: %d, want %d (keys %q)", code, want, keysOf(h.store))
			}
		})
	}
}
