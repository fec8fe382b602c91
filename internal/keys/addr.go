package keys

import "net/netip"

// Addr normalises an address, so that one host has one form: an
// IPv4-mapped IPv6 address ("::ffff:203.0.113.7") is its IPv4 address,
// and the zone is dropped.
func Addr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// IP is the key of an address, after Addr: an IPv4 address as it is
// ("203.0.113.7"), an IPv6 address by its /64 prefix
// ("2001:db8:1:2::/64"), since one host usually holds a whole /64. The
// zero Addr has the key "".
func IP(a netip.Addr) string {
	a = Addr(a)
	var buf [64]byte
	switch {
	case a.Is4():
		return string(a.AppendTo(buf[:0]))
	case a.Is6():
		p := netip.PrefixFrom(a, 64).Masked()
		b := p.Addr().AppendTo(buf[:0])
		b = append(b, "/64"...)
		return string(b)
	}
	return ""
}
