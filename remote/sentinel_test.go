package remote

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// TestSentinelFailover: a Store on a go-redis failover client decides and
// reconciles through the master the sentinels name; after a graceful
// failover it goes on against the new master, which has the state written
// before (replication) but not the scripts (Redis 7 does not replicate its
// script cache): they are sent again transparently. After the master is
// killed, the promoted replica serves it too.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	c := st.Client(t, func(o *redis.FailoverOptions) {
		o.MaxRetries = 3
		o.MinRetryBackoff = 10 * time.Millisecond
		o.MaxRetryBackoff = 100 * time.Millisecond
	})
	s, err := New(c, Options{Prefix: "sentinel:", Node: "a"})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))

	bucket := limit.Per(10, time.Hour) // nothing refills during the test
	slidingLog := limit.Per(10, time.Hour).WithAlgorithm(limit.SlidingWindowLog)
	fixed := limit.Per(10, time.Minute).WithAlgorithm(limit.FixedWindow)
	remaining := func(key string, lim limit.Limit) int64 {
		t.Helper()
		d, err := s.AllowN(bg, key, lim, 0)
		require.NoError(t, err)
		return d.Remaining
	}
	report := func(total int64) Answer {
		t.Helper()
		var r Round
		require.NoError(t, s.Reconcile(bg, []Report{{Key: "r", Limit: bucket, Epoch: 1, Total: total, Demand: 1}}, &r))
		require.Len(t, r.Answers, 1)
		require.NoError(t, r.Answers[0].Err)
		assert.Equal(t, 1, r.Nodes)
		return r.Answers[0]
	}
	allow := func(key string, lim limit.Limit, n int64) {
		t.Helper()
		d, err := s.AllowN(bg, key, lim, n)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s: %d more", key, n)
	}

	allow("k", bucket, 4)
	allow("l", slidingLog, 3)
	allow("w", fixed, 1)
	report(5)
	require.Equal(t, int64(6), remaining("k", bucket))
	require.Equal(t, int64(7), remaining("l", slidingLog))
	require.Equal(t, int64(5), remaining("r", bucket))

	// The replica has the data, not the scripts.
	replica := st.Replica()
	hashes := []any{s.scripts.gcra.Hash(), s.scripts.log.Hash(), s.scripts.window.Hash(), s.scripts.reconcile.Hash(), s.scripts.fleet.Hash()}
	exists, err := st.Master().Do(append([]any{"SCRIPT", "EXISTS"}, hashes...)...)
	require.NoError(t, err)
	assert.Equal(t, []any{int64(1), int64(1), int64(1), int64(1), int64(1)}, exists)
	exists, err = replica.Do(append([]any{"SCRIPT", "EXISTS"}, hashes...)...)
	require.NoError(t, err)
	assert.Equal(t, []any{int64(0), int64(0), int64(0), int64(0), int64(0)}, exists, "Redis 7 does not replicate the script cache")

	st.Failover(t)
	require.Same(t, replica, st.Master())

	// What was spent and reported before is there.
	assert.Equal(t, int64(6), remaining("k", bucket), "token bucket state replicated")
	assert.Equal(t, int64(7), remaining("l", slidingLog), "sliding log replicated")
	// The node's applied total was replicated with the state: the same
	// report again applies nothing, a larger one only the difference.
	report(5)
	assert.Equal(t, int64(5), remaining("r", bucket), "a repeated report is not applied twice after the failover")
	report(7)
	assert.Equal(t, int64(3), remaining("r", bucket))
	// And decisions spend on the new master.
	allow("k", bucket, 1)
	allow("l", slidingLog, 1)
	allow("w", fixed, 1)
	assert.Equal(t, int64(5), remaining("k", bucket))
	assert.Equal(t, int64(6), remaining("l", slidingLog))

	exists, err = replica.Do(append([]any{"SCRIPT", "EXISTS"}, hashes...)...)
	require.NoError(t, err)
	assert.Equal(t, []any{int64(1), int64(1), int64(1), int64(1), int64(1)}, exists, "the scripts were sent to the new master")

	// A crash: the promoted replica serves the store too. Which of the last
	// writes it has depends on replication timing, so only check it works.
	st.KillMaster(t)
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	_, err = s.AllowN(ctx, "k", bucket, 1)
	require.NoError(t, err)
	var r Round
	require.NoError(t, s.Reconcile(ctx, []Report{{Key: "r", Limit: bucket, Epoch: 1, Total: 8, Demand: 1}}, &r))
	require.NoError(t, r.Answers[0].Err)
}
