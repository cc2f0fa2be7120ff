package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// parseBan reads a ban list entry: an address ("2001:db8::1") or a CIDR
// ("203.0.113.0/24"). Host bits of a CIDR are masked off, and an
// IPv4-mapped IPv6 entry is read as the IPv4 one, as Plan reads addresses.
func parseBan(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("want an address or CIDR, got %q", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("want an address or CIDR, got %q", s)
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("address %q: zones are not allowed", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return normalPrefix(p), nil
}

// normalPrefix masks p and maps an IPv4-mapped IPv6 prefix to IPv4.
func normalPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// banList answers whether an address is banned with one map lookup per
// distinct prefix length in the list, whatever the list's size.
type banList struct {
	set      map[netip.Prefix]struct{}
	v4, v6   []int // distinct prefix lengths
	nonEmpty bool
}

func newBanList(ps []netip.Prefix) banList {
	b := banList{set: make(map[netip.Prefix]struct{}, len(ps))}
	for _, p := range ps {
		p = normalPrefix(p)
		if _, dup := b.set[p]; dup {
			continue
		}
		b.set[p] = struct{}{}
		lens := &b.v6
		if p.Addr().Is4() {
			lens = &b.v4
		}
		if !slices.Contains(*lens, p.Bits()) {
			*lens = append(*lens, p.Bits())
		}
	}
	b.nonEmpty = len(b.set) > 0
	return b
}

// banned reports whether ip (unmapped, without zone) is in the list.
func (b *banList) banned(ip netip.Addr) bool {
	if !b.nonEmpty || !ip.IsValid() {
		return false
	}
	lens := b.v6
	if ip.Is4() {
		lens = b.v4
	}
	for _, n := range lens {
		p, err := ip.Prefix(n)
		if err != nil {
			continue
		}
		if _, ok := b.set[p]; ok {
			return true
		}
	}
	return false
}
