package hybrid

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// A window limit without a period is the caller's mistake: an error in Sync
// mode as in the others, and the limiter decides on. Its estimate once
// divided by the period under the reporter's lock: the call panicked, and
// every later Sync decision and Close waited on that lock.
func TestSyncRefusesAWindowLimitWithoutAPeriod(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, RedisTimeout: 5 * time.Second})
	bad := Per(10, 0).WithAlgorithm(limit.FixedWindow)
	var err error
	require.NotPanics(t, func() { _, err = l.Allow(bg, "k", bad) })
	assert.ErrorIs(t, err, ErrInvalidLimit)
	admitted, _ := count(t, l, "other", Per(10, time.Second), 1)
	assert.Equal(t, 1, admitted, "the next decision is made")
}
