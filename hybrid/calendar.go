package hybrid

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Calendar quotas: a window algorithm's windows aligned to the days, weeks,
// months or years of a time zone (limit.PerCalendar). They run in
// LocalOnly and Sync mode, and in memory while a Sync limiter is degraded
// (that spend is not reported to Redis when it returns). Async mode refuses
// them: its reconciliation counts windows of a fixed period.

// Calendar units and their constructor, for callers that import only
// hybrid.
type Calendar = limit.Calendar

// The calendar units.
const (
	Day   = limit.Day
	Week  = limit.Week
	Month = limit.Month
	Year  = limit.Year
)

// PerCalendar is limit.PerCalendar: a fixed window limit of rate requests
// per calendar unit in the time zone called zone ("" for UTC).
func PerCalendar(rate int64, unit Calendar, zone string) Limit {
	return limit.PerCalendar(rate, unit, zone)
}

// asyncSupports returns ErrUnsupported, saying why, for a limit Async mode
// cannot decide in shares: the sliding window log (its exact log cannot be
// merged from summaries) and calendar windows. AllowN and Reset answer with
// it alike, so that no call on such a limit ever reaches the reconciler. lim
// is read, not kept: it does not escape (AllowN's copy stays on its stack).
func asyncSupports(lim *Limit) error {
	if lim.Algorithm == limit.SlidingWindowLog {
		return fmt.Errorf("%w: %v cannot run in async mode (its exact log cannot be merged from summaries): use sync or local mode", ErrUnsupported, lim.Algorithm)
	}
	if lim.Calendar != limit.NoCalendar {
		return fmt.Errorf("%w: calendar windows (%v) cannot run in async mode yet: use sync or local mode", ErrUnsupported, lim.String())
	}
	return nil
}
