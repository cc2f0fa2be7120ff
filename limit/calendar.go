package limit

import (
	"fmt"
	"sync"
	"time"
)

// Calendar aligns the windows of a window algorithm to the calendar in a
// time zone (Limit.Zone): a day from midnight to midnight, a week from
// Monday to Monday (ISO 8601), a month from its first day to the next one's,
// a year from January 1. Windows follow the zone's clocks, so a day that
// daylight saving time shortens lasts 23 hours. The zero value, NoCalendar,
// means windows of Limit.Period aligned to the Unix epoch.
type Calendar uint8

// The calendar units.
const (
	NoCalendar Calendar = iota
	Day
	Week
	Month
	Year
)

var calendarNames = [...]string{NoCalendar: "", Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns the unit's name: "day", "week", "month", "year"; "" for
// NoCalendar.
func (c Calendar) String() string {
	if int(c) >= len(calendarNames) {
		return fmt.Sprintf("calendar(%d)", uint8(c))
	}
	return calendarNames[c]
}

// ParseCalendar reads a calendar unit by name ("day", "week", "month",
// "year"), in any case.
func ParseCalendar(s string) (Calendar, error) {
	for i, name := range calendarNames[1:] {
		if equalFold(s, name) {
			return Calendar(i + 1), nil
		}
	}
	return NoCalendar, fmt.Errorf("%w: unknown calendar unit %q (want day, week, month or year)", ErrInvalidLimit, s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
}

// Nominal is a unit's usual length, for announcing a quota's window where
// no instant is at hand: 24 hours, 7 days, 30 days, 365 days; zero for
// NoCalendar. A window's own length is Window.Len.
func (c Calendar) Nominal() time.Duration {
	switch c {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Window is one window of a window algorithm: its index (consecutive
// windows have consecutive indexes) and the instants it starts, inclusive,
// and ends, exclusive, in Unix ns.
type Window struct {
	Index, Start, End int64
}

// Len is the window's length.
func (w Window) Len() time.Duration { return time.Duration(w.End - w.Start) }

// WindowAt returns the window of l that holds t (Unix ns). It is the one
// place that says where windows lie, for every window limit:
//
//   - without a Calendar, windows of Period aligned to the Unix epoch: the
//     index is t / Period;
//   - with one, the day, week, month or year holding t in loc, the time
//     zone of l.Zone (Zones.Load resolves it; nil means UTC). The index
//     counts units since 1970 in that calendar: days since 1970-01-01,
//     weeks since the week of Monday 1969-12-29, months since January
//     1970, years since 1970.
//
// l must be valid. The bucket algorithms have no windows: the result is
// meaningless for them.
func (l Limit) WindowAt(t int64, loc *time.Location) Window {
	if l.Calendar == NoCalendar {
		p := int64(l.Period)
		i := t / p
		if t%p < 0 {
			i--
		}
		return Window{Index: i, Start: i * p, End: (i + 1) * p}
	}
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := time.Unix(0, t).In(loc).Date()
	w := l.WindowOf(l.Calendar.index(y, m, d), loc)
	// Where a zone's clocks skip midnight, the window's start may read
	// either side of the gap: whichever it reads, its neighbours read the
	// same, so the windows still tile time. Step to the one holding t.
	switch {
	case t < w.Start:
		w = l.WindowOf(w.Index-1, loc)
	case t >= w.End:
		w = l.WindowOf(w.Index+1, loc)
	}
	return w
}

// WindowOf returns the window of l with index i: the inverse of WindowAt's
// index. loc is as for WindowAt.
func (l Limit) WindowOf(i int64, loc *time.Location) Window {
	if l.Calendar == NoCalendar {
		p := int64(l.Period)
		return Window{Index: i, Start: i * p, End: (i + 1) * p}
	}
	if loc == nil {
		loc = time.UTC
	}
	return Window{Index: i, Start: l.Calendar.start(i, loc), End: l.Calendar.start(i+1, loc)}
}

// index is the index of the unit holding the civil date y-m-d.
func (c Calendar) index(y int, m time.Month, d int) int64 {
	switch c {
	case Day:
		return civilDays(y, m, d)
	case Week:
		return floorDiv(civilDays(y, m, d)+3, 7) // 1970-01-01 was a Thursday
	case Month:
		return int64(y-1970)*12 + int64(m-1)
	}
	return int64(y - 1970)
}

// start is the instant the unit with index i begins in loc: its first
// civil day's midnight.
func (c Calendar) start(i int64, loc *time.Location) int64 {
	var y int
	var m time.Month
	d := 1
	switch c {
	case Day, Week:
		days := i
		if c == Week {
			days = i*7 - 3
		}
		t := time.Unix(days*86400, 0).UTC()
		y, m, d = t.Date()
	case Month:
		y, m = 1970+int(floorDiv(i, 12)), time.Month(i-floorDiv(i, 12)*12+1)
	default:
		y, m = 1970+int(i), time.January
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc).UnixNano()
}

// civilDays is the number of days from 1970-01-01 to y-m-d in the
// proleptic Gregorian calendar.
func civilDays(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// maxZoneLen bounds Limit.Zone: IANA names are at most 30-odd bytes.
const maxZoneLen = 64

// checkZone reports whether name can be an IANA zone name. Whether the zone
// exists is for Zones.Load to say: loading reads the zone database.
func checkZone(name string) error {
	if len(name) > maxZoneLen {
		return fmt.Errorf("%w: zone name of %d bytes exceeds %d", ErrInvalidLimit, len(name), maxZoneLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: zone %q: byte %q is not in a zone name", ErrInvalidLimit, name, c)
		}
	}
	return nil
}

// Zones resolves the time zones of calendar limits by name, loading each
// once: time.LoadLocation reads the zone database on every call, too slow
// for a decision. "" and "UTC" are UTC; "Local" is the host's zone. An
// unknown zone is an error wrapping ErrInvalidLimit, and is not cached.
//
// The zero value is ready to use. A Zones is safe for concurrent use; it
// holds at most one entry per zone name that loaded.
type Zones struct {
	mu sync.RWMutex
	m  map[string]*time.Location
}

// Load returns the zone called name.
func (z *Zones) Load(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	z.mu.RLock()
	loc, ok := z.m[name]
	z.mu.RUnlock()
	if ok {
		return loc, nil
	}
	if err := checkZone(name); err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q: %v", ErrInvalidLimit, name, err)
	}
	z.mu.Lock()
	if z.m == nil {
		z.m = make(map[string]*time.Location)
	}
	z.m[name] = loc
	z.mu.Unlock()
	return loc, nil
}
