package httpkey

import (
	"net/netip"
	"strings"
)

// nodeSyntax says what parseNode accepts beyond an address with an optional
// decimal port.
type nodeSyntax uint8

const (
	// zoneOK strips an IPv6 zone ("fe80::1%eth0") instead of refusing it.
	// Only for RemoteAddr: a zone names an interface of the host that wrote
	// it, so in a forwarding header it means nothing here.
	zoneOK nodeSyntax = 1 << iota
	// obfPortOK accepts an RFC 7239 obfuscated port ("[2001:db8::1]:_abc").
	obfPortOK
)

// parseNode parses one address with an optional port, as found in
// RemoteAddr, X-Forwarded-For and a Forwarded "for" value:
//
//	192.0.2.1   192.0.2.1:80   [2001:db8::1]   [2001:db8::1]:80   2001:db8::1
//
// An IPv4-mapped IPv6 address is unmapped ("::ffff:192.0.2.1" is 192.0.2.1).
// A bare IPv6 address takes no port: "2001:db8::1:80" is the address
// 2001:db8::1:80. Anything else, including "unknown" and obfuscated
// identifiers ("_hidden"), is refused.
func parseNode(s string, syntax nodeSyntax) (netip.Addr, bool) {
	var a netip.Addr
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		var err error
		if a, err = netip.ParseAddr(s[1:end]); err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], syntax)) {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 and a port. (Checked before parsing, as a failed
		// netip.ParseAddr allocates its error.)
		var err error
		if a, err = netip.ParseAddr(s[:i]); err != nil || !a.Is4() || !validPort(s[i+1:], syntax) {
			return netip.Addr{}, false
		}
	} else {
		// No colon (IPv4) or several (bare IPv6, which takes no port).
		var err error
		if a, err = netip.ParseAddr(s); err != nil {
			return netip.Addr{}, false
		}
	}
	if a.Zone() != "" {
		if syntax&zoneOK == 0 {
			return netip.Addr{}, false
		}
		a = a.WithZone("")
	}
	return a.Unmap(), true
}

// validPort reports whether p is a decimal port (0 to 65535, at most five
// digits) or, if syntax allows, an RFC 7239 obfuscated port: '_' followed by
// letters, digits, '.', '_' or '-'.
func validPort(p string, syntax nodeSyntax) bool {
	if syntax&obfPortOK != 0 && len(p) > 1 && p[0] == '_' {
		for i := 1; i < len(p); i++ {
			if c := p[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
