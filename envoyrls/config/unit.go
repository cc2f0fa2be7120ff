package config

import (
	"strings"
	"time"
)

// Unit is the unit of a rate limit's requests_per_unit. Its values are those
// of the RLS v3 protocol's RateLimitResponse.RateLimit.Unit, so a Unit
// converts to it, and from it, by a cast. The zero value is UnitUnknown,
// which no limit may have.
type Unit int32

// The units, as envoyproxy/ratelimit defines them: a month is 30 days and a
// year 365, and every window starts at a multiple of its length since the
// Unix epoch (a week starts on a Thursday, 00:00 UTC).
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	Second: "second", Minute: "minute", Hour: "hour", Day: "day",
	Week: "week", Month: "month", Year: "year",
}

// unitList is the units in the order error messages name them.
const unitList = "second, minute, hour, day, week, month or year"

// Seconds returns the length of one unit in seconds: 1 for Second up to
// 31,536,000 for Year. It returns 0 for UnitUnknown and values out of range.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 60 * 60
	case Day:
		return 24 * 60 * 60
	case Week:
		return 7 * 24 * 60 * 60
	case Month:
		return 30 * 24 * 60 * 60
	case Year:
		return 365 * 24 * 60 * 60
	}
	return 0
}

// Period returns the length of one unit as a duration (0 for an unknown
// unit).
func (u Unit) Period() time.Duration { return time.Duration(u.Seconds()) * time.Second }

// Valid reports whether u is one of the seven units.
func (u Unit) Valid() bool { return u.Seconds() > 0 }

// String returns the unit's name as the configuration spells it ("second"),
// or "unknown".
func (u Unit) String() string {
	if n, ok := unitNames[u]; ok {
		return n
	}
	return "unknown"
}

// ParseUnit reads a unit by name, in any case ("second", "SECOND"), as
// envoyproxy/ratelimit does. It reports false for any other name.
func ParseUnit(s string) (Unit, bool) {
	l := strings.ToLower(s)
	for u, n := range unitNames {
		if n == l {
			return u, true
		}
	}
	return UnitUnknown, false
}
