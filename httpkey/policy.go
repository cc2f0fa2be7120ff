package httpkey

import "fmt"

// HeaderPolicy says which forwarding header(s) IPResolver reads when the peer
// is a trusted proxy, and which wins when both are present.
//
// Choose the policy that matches what your proxies write. Proxies usually
// pass through headers they do not set themselves, so a client can send the
// other header with any address in it. With ForwardedOnly or
// XForwardedForOnly that header is never read. With PreferForwarded or
// PreferXForwardedFor it is read whenever the preferred one is absent: use a
// Prefer policy only when every trusted proxy sets the preferred header, or
// removes the other one.
//
// The zero value is ForwardedOnly: Forwarded because RFC 7239 standardizes it
// (quoting, IPv6 brackets, obfuscated identifiers), and only it because a
// fallback that a client can trigger is a way to spoof an address. If your
// proxy sets only X-Forwarded-For (nginx, AWS ALB, most CDNs), set
// XForwardedForOnly.
type HeaderPolicy uint8

// The header policies.
const (
	// ForwardedOnly reads the Forwarded header (RFC 7239) and never
	// X-Forwarded-For. The zero value.
	ForwardedOnly HeaderPolicy = iota
	// XForwardedForOnly reads X-Forwarded-For and never Forwarded.
	XForwardedForOnly
	// PreferForwarded reads Forwarded when the request has it, else
	// X-Forwarded-For.
	PreferForwarded
	// PreferXForwardedFor reads X-Forwarded-For when the request has it,
	// else Forwarded.
	PreferXForwardedFor
)

// The canonical header names, as http.Header stores them.
const (
	headerForwarded     = "Forwarded"
	headerXForwardedFor = "X-Forwarded-For"
)

// String returns the constant's name, or "HeaderPolicy(n)" for an unknown
// value.
func (p HeaderPolicy) String() string {
	switch p {
	case ForwardedOnly:
		return "ForwardedOnly"
	case XForwardedForOnly:
		return "XForwardedForOnly"
	case PreferForwarded:
		return "PreferForwarded"
	case PreferXForwardedFor:
		return "PreferXForwardedFor"
	}
	return fmt.Sprintf("HeaderPolicy(%d)", uint8(p))
}

// check returns an error if p is not one of the constants.
func (p HeaderPolicy) check() error {
	if p <= PreferXForwardedFor {
		return nil
	}
	return fmt.Errorf("httpkey: IPResolver.Header %v is not a HeaderPolicy constant", p)
}

// pick returns the header the policy reads from h, and its values. A header
// counts as present when it occurs at all, even with an empty value. Both
// names are looked up as stored, canonical, so the lookup never allocates.
func (p HeaderPolicy) pick(h map[string][]string) (name string, values []string) {
	fwd, xff := h[headerForwarded], h[headerXForwardedFor]
	switch p {
	case ForwardedOnly:
		return headerForwarded, fwd
	case XForwardedForOnly:
		return headerXForwardedFor, xff
	case PreferForwarded:
		if len(fwd) > 0 {
			return headerForwarded, fwd
		}
		return headerXForwardedFor, xff
	default: // PreferXForwardedFor
		if len(xff) > 0 {
			return headerXForwardedFor, xff
		}
		return headerForwarded, fwd
	}
}
