package rules

import (
	"net/netip"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Request describes a request to plan: who sends it, to what, and how
// urgent it is. The caller (the HTTP middleware) fills one per request. The
// zero Request is an anonymous, normal-priority request with no method,
// path, address or tier: only the global rule and the default (or a
// catch-all "/*" endpoint) rule apply to it.
type Request struct {
	// Method is the HTTP method; endpoint rules compare it
	// case-insensitively.
	Method string
	// Path is the URL path, without query (net/http's r.URL.Path). Plan does
	// not clean it: pass a cleaned path if the router cleans paths, so that
	// "/api//v1/search" cannot sidestep the rule for "/api/v1/search".
	Path string
	// IP is the client IP as resolved by the caller (trusted proxies already
	// applied). Plan reads an IPv4-mapped IPv6 address as IPv4 and ignores
	// zones. The zero Addr matches no ban and skips the per_ip check.
	IP netip.Addr
	// IPKey is the identity per_ip limits count the client under: its IP as
	// the caller groups clients, such as an IPv6 /64 (a subscriber may
	// rotate addresses freely inside it; httpkey.IPResolver.KeyOf gives it).
	// Empty means the IP itself. Bans always match IP, the exact address.
	IPKey string
	// Client is the identity of per-client limits (tier, endpoint, default),
	// such as "user:42", "ip:203.0.113.7" or "key:abc". It is used as given:
	// "" is one identity shared by every request that leaves it empty.
	Client string
	// User is the authenticated user's id; "" (anonymous) skips the per_user
	// check.
	User string
	// Tier is the client's tier, such as "free" or "premium"; "" or a tier
	// the configuration does not name skips the tier check.
	Tier string
	// Priority marks high-priority traffic, which skips the reserve checks
	// and so may use the capacity the priority reserve keeps back.
	Priority bool
}

// Check is one limit to check for a request: the rule it comes from, the
// limiter key and the limit to check it against, and whether it only
// observes. A Check is a small value.
type Check struct {
	// Rule names the rule, stable for metrics and logs: "global", "per_ip",
	// "per_user", "tier:free", "endpoint:POST /api/v1/upload", "default",
	// and "reserve:<rule>" for a rule's priority reserve check.
	Rule string
	// Key is the limiter key: the rule and the identity it limits. No two
	// different (rule, identity) pairs share a key (see the package
	// documentation). Plan does not check its length: a limiter rejects a
	// key longer than limit.MaxKeyLen.
	Key string
	// Limit is the limit to check Key against.
	Limit limit.Limit
	// Shadow means: decide and count, never block. It is the rule's shadow
	// flag OR the global one.
	Shadow bool
}

// Plan appends to dst, in evaluation order, the checks to run for req, and
// reports whether req's IP is banned, in which case it appends nothing. The
// order is global, per_ip, per_user, tier, then endpoint (the best matching
// endpoint rule, or the default rule when none matches); for a non-priority
// request under a priority reserve, each check is preceded by its
// "reserve:" check. A caller checks them in order and stops at the first
// that denies a request and is not a shadow check.
//
// Disabled rules plan nothing and ban nobody. Endpoint matching: an exact
// path beats a subtree ("/a/*"), a longer subtree beats a shorter one, and
// for the same pattern path a method's own rule beats the any-method rule.
//
// Plan does not allocate beyond one string per check whose key holds an
// identity (the global keys are constant), and none for dst when it has
// MaxChecks spare capacity. It is safe for concurrent use.
func (r *Rules) Plan(req Request, dst []Check) (banned bool, checks []Check) {
	if r.disabled {
		return false, dst
	}
	ip := req.IP.Unmap().WithZone("")
	if r.ban.banned(ip) {
		return true, dst
	}
	normal := !req.Priority
	if c := r.global; c != nil {
		if normal && c.reserve != nil {
			dst = append(dst, c.reserve.check(c.reserve.key))
		}
		dst = append(dst, c.check(c.key))
	}
	if c := r.perIP; c != nil && ip.IsValid() {
		var buf [64]byte
		id := ip.AppendTo(buf[:0])
		if req.IPKey != "" {
			id = append(buf[:0], req.IPKey...)
		}
		if normal && c.reserve != nil {
			dst = append(dst, c.reserve.check(c.reserve.prefix+string(id)))
		}
		dst = append(dst, c.check(c.prefix+string(id)))
	}
	if c := r.perUser; c != nil && req.User != "" {
		dst = c.appendTo(dst, req.User, normal)
	}
	if c := r.tiers[req.Tier]; c != nil {
		dst = c.appendTo(dst, req.Client, normal)
	}
	c := r.routes.match(req.Method, req.Path)
	if c == nil {
		c = r.fallback
	}
	if c != nil {
		dst = c.appendTo(dst, req.Client, normal)
	}
	return false, dst
}

// appendTo appends c's checks of identity id: its reserve check first for
// normal traffic, then its own.
func (c *compiledRule) appendTo(dst []Check, id string, normal bool) []Check {
	if normal && c.reserve != nil {
		dst = append(dst, c.reserve.check(c.reserve.prefix+id))
	}
	return append(dst, c.check(c.prefix+id))
}

func (c *compiledRule) check(key string) Check {
	return Check{Rule: c.name, Key: key, Limit: c.lim, Shadow: c.shadow}
}
