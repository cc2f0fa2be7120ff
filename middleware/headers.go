package middleware

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Header names in the canonical form http.Header stores them in, so that
// they can be set without canonicalizing: "X-Ratelimit-Limit" is how
// net/http spells X-RateLimit-Limit (header names are case-insensitive).
const (
	headerLimit      = "X-Ratelimit-Limit"
	headerRemaining  = "X-Ratelimit-Remaining"
	headerReset      = "X-Ratelimit-Reset"
	headerPolicy     = "Ratelimit-Policy"
	headerRateLimit  = "Ratelimit"
	headerRetryAfter = "Retry-After"
)

// maxHeaders is the most rate-limit fields one response gets.
const maxHeaders = 5

// setHeaders sets on h the rate-limit fields fam chooses, describing
// checks[show] decided as ds[show] at now, and, in RateLimit-Policy, every
// live check (a calendar limit's window being the one now falls in, its
// zone loaded through zones). On a denial the effective window t is wait,
// the Retry-After. It appends the values to buf and returns it; all the
// values share one string, and all the header slices one array.
func setHeaders(h http.Header, fam Headers, checks []rules.Check, ds []hybrid.Decision, show int, denied bool, wait time.Duration, now time.Time, zones *limit.Zones, buf []byte) []byte {
	if fam == NoHeaders {
		return buf
	}
	c, d := checks[show], ds[show]
	var ends [maxHeaders]int
	var names [maxHeaders]string
	k := 0
	next := func(name string) {
		ends[k], names[k] = len(buf), name
		k++
	}
	if fam.xRateLimit() {
		q, _ := PolicyQuota(c.Limit)
		buf = strconv.AppendInt(buf, q, 10)
		next(headerLimit)
		buf = strconv.AppendInt(buf, d.Remaining, 10)
		next(headerRemaining)
		buf = strconv.AppendInt(buf, resetUnix(now, d.ResetAfter), 10)
		next(headerReset)
	}
	if fam.ietf() {
		first := true
		for _, pc := range checks {
			if pc.Shadow {
				continue
			}
			if !first {
				buf = append(buf, ", "...)
			}
			first = false
			buf = appendPolicy(buf, pc.Rule, pc.Limit, now, zones)
		}
		next(headerPolicy)
		t := ceilSeconds(d.ResetAfter)
		if denied {
			t = retrySeconds(wait)
		}
		buf = appendServiceLimit(buf, c.Rule, d.Remaining, t)
		next(headerRateLimit)
	}
	s := string(buf)
	vals := make([]string, k)
	start := 0
	for i := range k {
		vals[i] = s[start:ends[i]]
		h[names[i]] = vals[i : i+1 : i+1]
		start = ends[i]
	}
	return buf
}

// tighter reports whether decision a of check ca leaves less of its limit
// than decision b of check cb: Remaining/Capacity compared exactly, in 128
// bits.
func tighter(a hybrid.Decision, ca rules.Check, b hybrid.Decision, cb rules.Check) bool {
	ahi, alo := bits.Mul64(uint64(max(a.Remaining, 0)), uint64(cb.Limit.Capacity()))
	bhi, blo := bits.Mul64(uint64(max(b.Remaining, 0)), uint64(ca.Limit.Capacity()))
	return ahi < bhi || ahi == bhi && alo < blo
}

// resetUnix is now + after in Unix seconds, rounded up: when the key is
// fresh again.
func resetUnix(now time.Time, after time.Duration) int64 {
	ns := now.UnixNano()
	after = max(after, 0)
	if ns > math.MaxInt64-int64(after) {
		return math.MaxInt64 / int64(time.Second)
	}
	ns += int64(after)
	s := ns / int64(time.Second)
	if ns%int64(time.Second) > 0 {
		s++
	}
	return s
}

// PolicyQuota returns the quota q and window w that RateLimit-Policy
// announces for l, and q is X-RateLimit-Limit: the limit as the rule wrote
// it, l.Rate requests per l.Period, whatever the algorithm. A bucket's
// burst is not the quota: {requests: 3, window: 60, burst: 2} announces
// q=3 and w=60, the burst showing in Remaining, which never exceeds it. A
// calendar limit's w is its unit's nominal length
// (limit.Calendar.Nominal): RateLimit-Policy itself announces the length
// of the calendar window the request falls in. RateLimit-Policy writes w in
// whole seconds, rounded up, at least 1.
func PolicyQuota(l limit.Limit) (q int64, w time.Duration) {
	if l.Calendar != limit.NoCalendar {
		return l.Rate, l.Calendar.Nominal()
	}
	return l.Rate, l.Period
}

// appendPolicy appends a Quota Policy Item of RateLimit-Policy:
// "name";q=Q;w=W. A calendar limit's w is the length of its window that
// holds now: a day of 23 hours, a month of 28 days.
func appendPolicy(b []byte, name string, l limit.Limit, now time.Time, zones *limit.Zones) []byte {
	q, w := PolicyQuota(l)
	if l.Calendar != limit.NoCalendar {
		if loc, err := zones.Load(l.Zone); err == nil { // the limiter loaded it already
			w = l.WindowAt(now.UnixNano(), loc).Len()
		}
	}
	b = appendSFString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampSF(q), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, clampSF(max(ceilSeconds(w), 1)), 10)
}

// appendServiceLimit appends a Service Limit Item of RateLimit:
// "name";r=R;t=T.
func appendServiceLimit(b []byte, name string, remaining, t int64) []byte {
	b = appendSFString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, clampSF(remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, clampSF(t), 10)
}

// appendSFString appends s as an sf-string (RFC 9651 section 3.3.3): quoted,
// with '"' and '\' escaped by '\'. An sf-string holds printable ASCII only,
// so any other byte is written as %XX.
func appendSFString(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// maxSFInteger is the largest sf-integer (RFC 9651 section 3.3.1: 15
// digits).
const maxSFInteger = 999_999_999_999_999

// clampSF caps n to what an sf-integer holds; a negative reads as 0.
func clampSF(n int64) int64 { return min(max(n, 0), maxSFInteger) }
