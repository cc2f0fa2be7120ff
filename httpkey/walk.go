package httpkey

import (
	"net/netip"
	"strings"
)

// A forwarding chain lists, left to right, the client and then each proxy the
// request passed through; every proxy appends the address it received the
// request from. Only the entries appended by proxies we trust are true, so
// the chain is read from the right (nearest hop) leftwards while the hops are
// trusted proxies: the first address that is not one is the client.
//
// Each walk starts with the client being the peer (r.RemoteAddr, itself a
// trusted proxy) and, per entry:
//
//   - a malformed entry stops the walk, keeping the last good address;
//   - a well-formed entry becomes the client; if it is not a trusted proxy,
//     the walk stops there.
//
// So a chain of trusted proxies only yields its leftmost entry, and a chain
// whose first entry (from the right) is malformed yields the peer.
//
// note, when not nil, is told of every entry read, in order, as written and
// as parsed (good false for a malformed one): Trace's account of the walk.

// walkForwarded walks the chain of Forwarded header values, later header
// lines being further right.
func walkForwarded(values []string, peer netip.Addr, trusted []netip.Prefix, note noteFunc) netip.Addr {
	client := peer
	for v := len(values) - 1; v >= 0; v-- {
		sc := newForwardedScanner(values[v])
		for {
			node, ok, more := sc.next()
			if !more {
				break
			}
			a, good := netip.Addr{}, false
			if ok {
				a, good = parseNode(node, obfPortOK)
			}
			if note != nil {
				note(node, a, good)
			}
			if !good {
				return client
			}
			client = a
			if !trusts(trusted, a) {
				return client
			}
		}
	}
	return client
}

// walkXForwardedFor walks the chain of X-Forwarded-For header values, later
// header lines being further right. Entries are separated by commas; empty
// ones are skipped.
func walkXForwardedFor(values []string, peer netip.Addr, trusted []netip.Prefix, note noteFunc) netip.Addr {
	client := peer
	for v := len(values) - 1; v >= 0; v-- {
		s := values[v]
		for end := len(s); end >= 0; {
			start := strings.LastIndexByte(s[:end], ',') + 1
			entry := strings.Trim(s[start:end], " \t")
			end = start - 1
			if entry == "" {
				continue
			}
			a, ok := parseNode(entry, 0)
			if note != nil {
				note(entry, a, ok)
			}
			if !ok {
				return client
			}
			client = a
			if !trusts(trusted, a) {
				return client
			}
		}
	}
	return client
}

// noteFunc is told of one entry of a forwarding chain: as written, as
// parsed, and whether it parsed.
type noteFunc func(entry string, a netip.Addr, good bool)
