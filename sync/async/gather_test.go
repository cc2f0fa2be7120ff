package async

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The sender gathers ops only while the node is busy: a lone ask on a quiet
// node goes at once; within ten windows of the last call, it waits one
// window (a tenth of the interval, at most 2 ms) for the ops that follow.
func TestTheSenderGathersOpsOnlyWhileTheNodeIsBusy(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		last     time.Time // the last call began; zero: none yet
		now      time.Time
		want     time.Duration
	}{
		{"the first call", 20 * time.Millisecond, time.Time{}, t0, 0},
		{"a call 1 ms ago", 20 * time.Millisecond, t0, t0.Add(time.Millisecond), 2 * time.Millisecond},
		{"a call 20 ms ago: still busy", 20 * time.Millisecond, t0, t0.Add(20 * time.Millisecond), 2 * time.Millisecond},
		{"a call 21 ms ago: quiet", 20 * time.Millisecond, t0, t0.Add(21 * time.Millisecond), 0},
		{"a shorter interval gathers a tenth of it", 5 * time.Millisecond, t0, t0.Add(time.Millisecond), 500 * time.Microsecond},
		{"a longer interval gathers at most 2 ms", time.Second, t0, t0.Add(time.Millisecond), 2 * time.Millisecond},
		{"a clock stepped back: busy", 20 * time.Millisecond, t0, t0.Add(-time.Second), 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, newGather(tc.interval).before(tc.now, tc.last))
		})
	}
}
