package main

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	if s == "" {
		return errors.New("want a file or directory")
	}
	*f = append(*f, s)
	return nil
}

// bytesFlag is a size in bytes: a whole number, or one with the suffix
// KiB, MiB or GiB.
type bytesFlag int64

var byteUnits = []struct {
	suffix string
	shift  uint
}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}}

func (f *bytesFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *bytesFlag) Set(s string) error {
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64>>u.shift {
			break
		}
		*f = bytesFlag(n << u.shift)
		return nil
	}
	return fmt.Errorf("%q: want a positive size such as 268435456, 512MiB or 1GiB", s)
}

// hostsFlag is a comma-separated list of host names; set even when the
// list is empty, so that -http-allowed-hosts "" answers IP addresses and
// localhost only.
type hostsFlag struct {
	names []string
	set   bool
}

func (f *hostsFlag) String() string { return strings.Join(f.names, ",") }

func (f *hostsFlag) Set(s string) error {
	f.names, f.set = []string{}, true
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.ContainsAny(part, ":/[] ") {
			return fmt.Errorf("%q: want a host name, without a port (IP addresses and localhost are always answered)", part)
		}
		f.names = append(f.names, part)
	}
	return nil
}

// list is the names for server.Settings.HTTPAllowedHosts: nil, any host,
// when the flag is not given.
func (f *hostsFlag) list() []string {
	if !f.set {
		return nil
	}
	return f.names
}

// prefixFlag is a comma-separated list of CIDR prefixes or addresses.
type prefixFlag struct {
	prefixes []netip.Prefix
	set      bool
}

func (f *prefixFlag) String() string {
	var s []string
	for _, p := range f.prefixes {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func (f *prefixFlag) Set(s string) error {
	f.prefixes, f.set = []netip.Prefix{}, true
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			a, aerr := netip.ParseAddr(part)
			if aerr != nil {
				return fmt.Errorf("%q: want a CIDR prefix such as 10.0.0.0/8, or an address", part)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.prefixes = append(f.prefixes, p)
	}
	return nil
}
