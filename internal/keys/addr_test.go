package keys

import (
	"net/netip"
	"testing"
)

func TestIP(t *testing.T) {
	tests := []struct {
		in, want string // in "" for the zero Addr
	}{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"::", "::/64"},
		{"0.0.0.0", "0.0.0.0"},
		{"", ""},
	}
	for _, tt := range tests {
		var a netip.Addr
		if tt.in != "" {
			a = netip.MustParseAddr(tt.in)
		}
		if got := IP(a); got != tt.want {
			t.Errorf("IP(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"fe80::1%eth0", "fe80::1"},
		{"2001:db8::1", "2001:db8::1"},
	}
	for _, tt := range tests {
		if got := Addr(netip.MustParseAddr(tt.in)); got != netip.MustParseAddr(tt.want) {
			t.Errorf("Addr(%s) = %v, want %s", tt.in, got, tt.want)
		}
	}
}
