package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

func TestTrust(t *testing.T) {
	tr, err := Trust(netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.MustParsePrefix("192.0.2.77/24"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr[0].String() + " " + tr[1].String(); got != "10.0.0.0/8 192.0.2.0/24" {
		t.Errorf("Trust normalised to %s", got)
	}
	if _, err := Trust(netip.MustParsePrefix("10.0.0.0/8"), netip.Prefix{}); err == nil || !strings.Contains(err.Error(), "prefix 1") {
		t.Errorf("Trust(zero prefix) = %v, want an error naming it", err)
	}
}

func TestWalk(t *testing.T) {
	tr, _ := Trust(netip.MustParsePrefix("10.0.0.0/8"))
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tt := range []struct {
		xff  []string
		want string
	}{
		{nil, "10.0.0.1"},
		{[]string{"6.6.6.6, 198.51.100.1, 10.0.0.2"}, "198.51.100.1"},
		{[]string{"6.6.6.6", "198.51.100.1"}, "198.51.100.1"},
		{[]string{"198.51.100.1, , 10.0.0.3"}, "198.51.100.1"},
		{[]string{"198.51.100.1, junk, 10.0.0.3"}, "10.0.0.3"},
		{[]string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{[]string{"::ffff:198.51.100.9"}, "198.51.100.9"},
		{[]string{"198.51.100.1," + strings.Repeat("10.0.0.5,", MaxHops)}, "10.0.0.5"},
	} {
		if got := tr.Walk(peer, tt.xff).String(); got != tt.want {
			t.Errorf("Walk(%q) = %s, want %s", tt.xff, got, tt.want)
		}
	}
}
