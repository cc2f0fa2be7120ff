package httpkey

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
)

// IPResolver finds the address of the client that sent a request, and keys
// requests by it.
//
// The client is r.RemoteAddr, unless that peer is one of TrustedProxies: then
// the forwarding header chosen by Header is read from the right, past every
// address that is itself a trusted proxy, and the first other address is the
// client. A chain of trusted proxies only gives its leftmost address. A
// malformed entry ("unknown", "_hidden", a syntax error) stops the reading at
// the last good address: garbage is never trusted. A trusted peer that sends
// no such header is itself the client.
//
// Addresses are unmapped (::ffff:192.0.2.1 is 192.0.2.1), so a client has one
// key whichever way its connection arrives; RemoteAddr loses its IPv6 zone,
// and a zone in a header is malformed.
//
// Key groups IPv6 clients by IPv6Prefix bits, /64 by default. An IPv6
// subscriber is given a /64 or larger and may use any address in it, a new
// one per request if it likes; a limit per address would give it 2^64
// budgets. Limiting per /64 counts the subscriber once. IPv4 addresses are
// scarce, and often already shared behind NAT, so they are not grouped unless
// IPv4Prefix says so.
//
// The zero value trusts no proxy, reads only RemoteAddr, and groups IPv6 by
// /64. An IPResolver is safe for concurrent use as long as no field changes;
// IP takes a copy.
type IPResolver struct {
	// TrustedProxies are the peers whose forwarding headers are believed;
	// ParseTrustedProxies builds it from a string. Empty: headers are never
	// read. List only proxies you run or pay for: any address here can claim
	// to forward for any client.
	TrustedProxies []netip.Prefix

	// IPv6Prefix groups IPv6 clients into one key per prefix of this many
	// bits, 1 to 128. Zero means 64; 128 keys each address alone. Shorter
	// prefixes (48, 56) count once a customer that was given a whole /48 or
	// /56, at the cost of lumping together customers of a provider that
	// hands out /64s from one such prefix.
	IPv6Prefix int

	// IPv4Prefix groups IPv4 clients into one key per prefix of this many
	// bits, 1 to 32. Zero means 32: each address alone.
	IPv4Prefix int

	// Header says which forwarding header to read from a trusted peer, and
	// which wins when both are present; see HeaderPolicy. The zero value
	// reads only Forwarded (RFC 7239).
	Header HeaderPolicy
}

// IP returns an Extractor that keys requests by client address, as
// resolver.Key does. It copies resolver, so changing it (or the TrustedProxies
// array) afterwards changes nothing.
func IP(resolver IPResolver) Extractor {
	resolver.TrustedProxies = slices.Clone(resolver.TrustedProxies)
	return resolver.Key
}

// Validate reports a configuration that every call would refuse: a prefix
// length or header policy out of range. ClientIP and Key check the same, so
// calling Validate at startup only moves the failure earlier.
func (r *IPResolver) Validate() error {
	if r.IPv6Prefix < 0 || r.IPv6Prefix > 128 {
		return fmt.Errorf("httpkey: IPResolver.IPv6Prefix %d out of range 1 to 128 (0 means 64)", r.IPv6Prefix)
	}
	if r.IPv4Prefix < 0 || r.IPv4Prefix > 32 {
		return fmt.Errorf("httpkey: IPResolver.IPv4Prefix %d out of range 1 to 32 (0 means 32)", r.IPv4Prefix)
	}
	return r.Header.check()
}

// ClientIP returns the address of the client that sent req, ungrouped. It
// fails when RemoteAddr is not an IP address, with or without a port: a Unix
// socket's "@" or "", for instance. That error does not wrap ErrNoKey, so
// First does not silently fall back past a listener the resolver cannot read.
func (r *IPResolver) ClientIP(req *http.Request) (netip.Addr, error) {
	return r.clientIP(req, nil, nil)
}

// clientIP is ClientIP, telling peer (when not nil) of the peer and, when
// it is trusted, note of each forwarding entry read, with the header's
// name.
func (r *IPResolver) clientIP(req *http.Request, peerNote func(netip.Addr), note func(header string) noteFunc) (netip.Addr, error) {
	if err := r.Header.check(); err != nil {
		return netip.Addr{}, err
	}
	peer, ok := parseNode(req.RemoteAddr, zoneOK)
	if !ok {
		return netip.Addr{}, fmt.Errorf("httpkey: RemoteAddr %q is not an IP address with or without a port", req.RemoteAddr)
	}
	if peerNote != nil {
		peerNote(peer)
	}
	if !trusts(r.TrustedProxies, peer) {
		return peer, nil
	}
	name, values := r.Header.pick(req.Header)
	var n noteFunc
	if note != nil {
		n = note(name)
	}
	if name == headerForwarded {
		return walkForwarded(values, peer, r.TrustedProxies, n), nil
	}
	return walkXForwardedFor(values, peer, r.TrustedProxies, n), nil
}

// Key returns the rate-limit key of req's client: "ip:" and the address
// ("ip:203.0.113.7", "ip:2001:db8::1" with IPv6Prefix 128), or its group as a
// masked prefix ("ip:2001:db8:1:2::/64", "ip:203.0.113.0/24" with IPv4Prefix
// 24). The forms never collide: a group always carries its length.
func (r *IPResolver) Key(req *http.Request) (string, error) {
	a, err := r.ClientIP(req)
	if err != nil {
		return "", err
	}
	return r.KeyOf(a)
}

// KeyOf returns the key Key gives a client at address a: the address, or
// its group. A caller that already has the address (for a ban list, say)
// keys it without resolving the request again.
func (r *IPResolver) KeyOf(a netip.Addr) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "", fmt.Errorf("httpkey: no address to key")
	}
	bits := r.IPv6Prefix
	if a.Is4() {
		bits = r.IPv4Prefix
	} else if bits == 0 {
		bits = 64
	}
	var buf [64]byte // "ip:" + the longest IPv6 prefix, 46 bytes
	b := append(buf[:0], "ip:"...)
	if bits == 0 || bits == a.BitLen() {
		b = a.AppendTo(b)
	} else {
		b = netip.PrefixFrom(a, bits).Masked().AppendTo(b)
	}
	return string(b), nil
}
