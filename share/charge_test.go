package share_test

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// Charge counts what was admitted outside a share in it: scaled by the
// share, never less than was charged, never past MaxCharge (a whole bucket
// of a 30-day limit charged to a sliver of a pool overflowed an int64, and
// past 2^53 the script's doubles part from the model's integers: found in
// review).
func TestCharge(t *testing.T) {
	day := limit.Per(10, 24*time.Hour).Canonical()
	month := limit.Per(10, 30*24*time.Hour).Canonical()
	for _, tc := range []struct {
		name  string
		lim   limit.Limit
		g     int64
		level int64
		want  int64
	}{
		{"the whole pool: the level as it is", day, share.One, 1_000_000, 1_000_000},
		{"half the pool: twice the level", day, share.One / 2, 1_000_000, 2_000_000},
		{"rounded up", day, 3, 1, (share.One + 2) / 3},
		{"nothing charged", day, share.One / 2, 0, 0},
		{"no pool", day, 0, 1_000_000, 0},
		{"a sliver of a month's pool, a whole bucket: capped", month, 5, int64(month.Tolerance()), share.MaxCharge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := share.ParamsOf(tc.lim)
			if !ok {
				t.Fatal("no params")
			}
			got := p.Charge(share.State{}, tc.g, tc.level).Level
			if got != tc.want {
				t.Errorf("Charge(%d, %d) = %d, want %d", tc.g, tc.level, got, tc.want)
			}
		})
	}
}
