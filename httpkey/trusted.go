package httpkey

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseTrustedProxies parses a list of trusted proxies for
// IPResolver.TrustedProxies, as an environment variable or flag would hold
// it: prefixes and bare addresses separated by commas and/or white space.
// "10.0.0.0/8, 192.168.1.1, ::1" gives 10.0.0.0/8, 192.168.1.1/32 and
// ::1/128. An empty list gives nil: trust no one.
//
// IPv4-mapped IPv6 entries become IPv4 ("::ffff:10.0.0.1" is 10.0.0.1/32),
// because IPResolver compares unmapped addresses. A prefix with bits set
// beyond its length ("10.1.2.3/8") is refused rather than widened: in a list
// of whom to trust, a typo must not grant more than was written. Zones are
// refused.
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	fields := strings.FieldsFunc(list, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	if len(fields) == 0 {
		return nil, nil
	}
	out := make([]netip.Prefix, 0, len(fields))
	for i, f := range fields {
		p, err := parseTrustedProxy(f)
		if err != nil {
			return nil, fmt.Errorf("httpkey: trusted proxy %d of %d, %q: %w", i+1, len(fields), f, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseTrustedProxy parses one entry of ParseTrustedProxies.
func parseTrustedProxy(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zone %q not allowed", a.Zone())
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("has bits set beyond /%d; did you mean %s?", p.Bits(), m)
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// trusts reports whether a, an unmapped address without zone, lies in one of
// the prefixes. A prefix written as IPv4-mapped IPv6 (::ffff:10.0.0.0/104)
// matches the IPv4 addresses it maps, as ParseTrustedProxies would have made
// it; an invalid (zero) prefix matches nothing.
func trusts(prefixes []netip.Prefix, a netip.Addr) bool {
	_, ok := trustedBy(prefixes, a)
	return ok
}

// trustedBy returns the first of prefixes that holds a, as trusts reads
// them.
func trustedBy(prefixes []netip.Prefix, a netip.Addr) (netip.Prefix, bool) {
	for _, p := range prefixes {
		if p.Contains(a) {
			return p, true
		}
		if pa := p.Addr(); a.Is4() && pa.Is4In6() && p.Bits() >= 96 &&
			netip.PrefixFrom(pa.Unmap(), p.Bits()-96).Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
