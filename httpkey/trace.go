package httpkey

import (
	"net/http"
	"net/netip"
)

// Step is one address an IPResolver weighed while finding a request's
// client: the peer, then each forwarding entry it read, right to left.
type Step struct {
	// Source is where the address was read: "RemoteAddr", "Forwarded" or
	// "X-Forwarded-For".
	Source string
	// Entry is the address as written.
	Entry string
	// Addr is the address read: unmapped, without zone. The zero Addr
	// stands for a malformed entry, which ends the reading.
	Addr netip.Addr
	// Trusted is the trusted proxy prefix Addr lies in, and the zero Prefix
	// when it lies in none: the address is then the client's, and the
	// reading ends.
	Trusted netip.Prefix
}

// Trace is ClientIP with its reasoning: the address of the client that sent
// req, and the steps that led to it, the peer first. ClientIP and Trace
// walk the same code: the address is the one ClientIP returns. It
// allocates, and is meant for diagnostics (`hybridlimit explain`), not for
// every request.
func (r *IPResolver) Trace(req *http.Request) (netip.Addr, []Step, error) {
	var steps []Step
	step := func(source, entry string, a netip.Addr) {
		s := Step{Source: source, Entry: entry, Addr: a}
		if a.IsValid() {
			s.Trusted, _ = trustedBy(r.TrustedProxies, a)
		}
		steps = append(steps, s)
	}
	a, err := r.clientIP(req,
		func(peer netip.Addr) { step("RemoteAddr", req.RemoteAddr, peer) },
		func(header string) noteFunc {
			return func(entry string, a netip.Addr, good bool) {
				if !good {
					a = netip.Addr{}
				}
				step(header, entry, a)
			}
		})
	return a, steps, err
}
