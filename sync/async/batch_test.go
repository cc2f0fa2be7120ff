package async

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/remote"
)

func TestBatchFollowsWhatCallsTook(t *testing.T) {
	const timeout = 40 * time.Millisecond
	type call struct {
		n    int
		took time.Duration
		err  error
	}
	for _, tc := range []struct {
		name  string
		most  int
		calls []call
		want  int
	}{
		{"starts at the most", 2000, nil, 2000},
		{"a timeout halves the size", 2000, []call{{2000, timeout, breaker.ErrTimeout}}, 1000},
		{"Redis's own timeout halves it too", 2000, []call{{2000, timeout, fmt.Errorf("x: %w", remote.ErrTimeout)}}, 1000},
		{"timeouts in a row shrink it to one", 2000, []call{{2000, 0, breaker.ErrTimeout}, {1000, 0, breaker.ErrTimeout}, {500, 0, breaker.ErrTimeout},
			{250, 0, breaker.ErrTimeout}, {125, 0, breaker.ErrTimeout}, {62, 0, breaker.ErrTimeout}, {31, 0, breaker.ErrTimeout},
			{15, 0, breaker.ErrTimeout}, {7, 0, breaker.ErrTimeout}, {3, 0, breaker.ErrTimeout}, {1, 0, breaker.ErrTimeout}, {1, 0, breaker.ErrTimeout}}, 1},
		{"a small call that timed out halves what it carried", 2000, []call{{10, timeout, breaker.ErrTimeout}}, 5},
		{"a slow answer sizes the next to a quarter of the timeout", 2000, []call{{2000, 20 * time.Millisecond, nil}}, 1000},
		{"a fast answer grows it, at most twice", 2000, []call{{2000, 0, breaker.ErrTimeout}, {1000, time.Millisecond, nil}}, 2000},
		{"growth stops at the most", 100, []call{{100, time.Microsecond, nil}}, 100},
		{"growth is at most twice the size", 2000, []call{{2000, 0, breaker.ErrTimeout}, {1000, 0, breaker.ErrTimeout}, {500, 0, breaker.ErrTimeout},
			{250, time.Microsecond, nil}}, 500},
		{"a small slow call does not shrink it", 2000, []call{{3, 20 * time.Millisecond, nil}}, 2000},
		{"a small fast call may grow it", 2000, []call{{2000, 0, breaker.ErrTimeout}, {10, time.Microsecond, nil}}, 2000},
		{"an open breaker says nothing of the size", 2000, []call{{2000, 0, breaker.ErrOpen}}, 2000},
		{"a failed connection says nothing of the size", 2000, []call{{2000, time.Millisecond, errors.New("connection refused")}}, 2000},
		{"an empty call says nothing", 2000, []call{{0, timeout, breaker.ErrTimeout}}, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBatch(tc.most)
			for _, c := range tc.calls {
				b.done(c.n, c.took, timeout, c.err)
			}
			assert.Equal(t, tc.want, b.next())
		})
	}
}
