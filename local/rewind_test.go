package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// A clock that ran 5 minutes ahead and is brought back: every algorithm
// decides on the true time again, keeps what it admitted meanwhile, and is
// refilled by nothing.
func TestRewindBringsStateBackToNow(t *testing.T) {
	const ahead = int64(5 * time.Minute)
	for _, lim := range []limit.Limit{
		limit.PerSecond(10),
		limit.PerSecond(10).WithAlgorithm(limit.LeakyBucket).WithBurst(1),
		limit.PerSecond(10).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowCounter),
		limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowLog),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			e := newEngine(t, Config{Shards: 1, TrackSpend: true, KeepOrphans: true})
			admitted := func(at int64, n int) int {
				got := 0
				for range n {
					res, err := e.AllowN(at, "k", lim, 1)
					require.NoError(t, err)
					if res.Allowed {
						got++
					}
				}
				return got
			}
			// The clock jumps ahead, the key is spent there.
			require.Positive(t, admitted(t0+ahead, 20))
			assert.Equal(t, 1, e.Rewind(t0))
			assert.Zero(t, e.Rewind(t0), "nothing ahead any more")
			assert.Zero(t, admitted(t0, 20), "what was admitted ahead stays admitted: nothing refills")

			// Time runs on from now, not from 5 minutes ahead: within a
			// minute the key admits again (the buckets' state is corrected
			// by the next seed; on their own they wait out what they spent).
			if !lim.Algorithm.IsBucket() {
				assert.Positive(t, admitted(t0+int64(2*time.Second), 20), "time runs on from now")
			}
			sp := e.TakeSpend(nil)
			for _, s := range sp {
				if !s.Limit.Algorithm.IsBucket() && s.Limit.Algorithm != limit.SlidingWindowLog {
					assert.LessOrEqual(t, s.Window, (t0+int64(2*time.Second))/int64(time.Second), "spend is reported in windows of the true time")
				}
			}
		})
	}
}
