package redistest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeySlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3}, // the CRC-16/XMODEM check value
		{"foo", 12182},        // from the Redis Cluster specification
		{"{user1000}.following", keySlot("user1000")},
		{"foo{}{bar}", keySlot("foo{}{bar}")}, // empty first tag: whole key
		{"foo{{bar}}zap", keySlot("{bar")},
		{"foo{bar}{zap}", keySlot("bar")},
		{"", 0},
	} {
		assert.Equal(t, tc.want, keySlot(tc.key), "keySlot(%q)", tc.key)
	}
	assert.NotEqual(t, keySlot("foo{}{bar}"), keySlot("bar"))
}

// clusterTimeouts makes a cluster client fail fast on a dead master instead of
// retrying for seconds.
func clusterTimeouts(o *redis.ClusterOptions) {
	o.DialTimeout = 300 * time.Millisecond
	o.ReadTimeout = 300 * time.Millisecond
	o.WriteTimeout = 300 * time.Millisecond
	o.MaxRedirects = 1
	o.DialerRetries = 1
	o.MinRetryBackoff = time.Millisecond
	o.MaxRetryBackoff = 10 * time.Millisecond
}

// TestCluster walks one cluster through its life: data spread over all
// masters, one master killed (only its keys fail), the master restarted (the
// cluster recovers, the master's data is gone).
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	begin := time.Now()
	c := StartCluster(t, 3)
	t.Logf("StartCluster took %v", time.Since(begin))

	masters := c.Masters()
	require.Len(t, masters, 3)
	require.Equal(t, []string{masters[0].Addr(), masters[1].Addr(), masters[2].Addr()}, c.Addrs())
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(c.Addrs()))), 3, "distinct addresses")

	cc := c.Client(t, clusterTimeouts)
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("key:", i)
		require.NoError(t, cc.Set(ctx, keys[i], i, 0).Err())
	}
	for i, key := range keys {
		got, err := cc.Get(ctx, key).Int()
		require.NoError(t, err)
		require.Equal(t, i, got)
	}

	// Every master holds some of the keys, and each key sits on the master
	// that owns its slot according to the server itself.
	total := int64(0)
	for _, m := range masters {
		size, err := m.Do("DBSIZE")
		require.NoError(t, err)
		assert.Positive(t, size, "master %s holds keys", m.Addr())
		total += size.(int64)
	}
	assert.EqualValues(t, n, total)
	onMaster := map[*Server][]string{}
	for i, key := range keys {
		owner := c.MasterFor(key)
		onMaster[owner] = append(onMaster[owner], key)
		if i%15 != 0 {
			continue
		}
		slot, err := masters[i%3].Do("CLUSTER", "KEYSLOT", key)
		require.NoError(t, err)
		assert.EqualValues(t, keySlot(key), slot, "slot of %q", key)
		exists, err := owner.Do("EXISTS", key)
		require.NoError(t, err)
		assert.EqualValues(t, 1, exists, "%q is stored on %s", key, owner.Addr())
		for _, other := range masters {
			if other != owner {
				_, err := other.Do("EXISTS", key)
				assert.ErrorContains(t, err, "MOVED", "%s does not own %q", other.Addr(), key)
			}
		}
	}
	require.Len(t, onMaster, 3)

	// Kill one master: its keys fail, the others' keep working.
	victim := masters[1]
	victim.Kill()
	for _, key := range onMaster[victim][:5] {
		err := cc.Get(ctx, key).Err()
		assert.Error(t, err, "key %q on the killed master", key)
		assert.NotErrorIs(t, err, redis.Nil)
	}
	for _, m := range []*Server{masters[0], masters[2]} {
		for _, key := range onMaster[m][:20] {
			require.NoError(t, cc.Get(ctx, key).Err(), "key %q on live master %s", key, m.Addr())
		}
	}
	// The survivors still consider the cluster up (partial coverage).
	waitFlaggedFail(t, masters[0], victim)
	c.WaitHealthy(t)
	for _, m := range []*Server{masters[0], masters[2]} {
		for _, key := range onMaster[m][:20] {
			require.NoError(t, cc.Get(ctx, key).Err(), "key %q on live master %s", key, m.Addr())
		}
	}

	// Restart it: the cluster heals, the master is back with its slots but
	// without its data.
	begin = time.Now()
	victim.Restart()
	c.WaitHealthy(t)
	t.Logf("cluster healthy %v after the master restart", time.Since(begin))

	fresh := c.Client(t, clusterTimeouts)
	for _, key := range onMaster[victim][:20] {
		assert.ErrorIs(t, fresh.Get(ctx, key).Err(), redis.Nil, "%q was lost with the restart", key)
	}
	require.NoError(t, fresh.Set(ctx, onMaster[victim][0], "new", 0).Err())
	exists, err := victim.Do("EXISTS", onMaster[victim][0])
	require.NoError(t, err)
	assert.EqualValues(t, 1, exists, "the restarted master owns its slots again")
	for _, m := range []*Server{masters[0], masters[2]} {
		for _, key := range onMaster[m][:20] {
			require.NoError(t, fresh.Get(ctx, key).Err(), "key %q on %s survived", key, m.Addr())
		}
	}

	// The client that saw the failure recovers as well.
	begin = time.Now()
	assert.EventuallyWithT(t, func(t *assert.CollectT) {
		assert.Equal(t, "new", cc.Get(ctx, onMaster[victim][0]).Val())
	}, 5*time.Second, 20*time.Millisecond)
	t.Logf("old cluster client recovered %v after WaitHealthy", time.Since(begin))

	c.Flush()
	for _, m := range masters {
		size, err := m.Do("DBSIZE")
		require.NoError(t, err)
		assert.EqualValues(t, 0, size)
	}
}

// TestClusterPausedMaster checks that WaitHealthy ignores a paused master and
// that the cluster converges again after Resume.
func TestClusterPausedMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartCluster(t, 3)
	m := c.Masters()[2]
	key := "paused-key"
	for n := 0; c.MasterFor(key) != m; n++ {
		key = fmt.Sprint("paused-key-", n)
	}
	cc := c.Client(t, clusterTimeouts)
	require.NoError(t, cc.Set(ctx, key, "v", 0).Err())

	m.Pause()
	assert.Error(t, cc.Get(ctx, key).Err())
	// Stay paused until the others have flagged the master as failed, so
	// Resume exercises the recovery from FAIL.
	waitFlaggedFail(t, c.Masters()[0], m)
	c.WaitHealthy(t) // the survivors are fine

	begin := time.Now()
	m.Resume()
	c.WaitHealthy(t)
	t.Logf("cluster healthy %v after resuming a master", time.Since(begin))
	assert.EventuallyWithT(t, func(t *assert.CollectT) {
		got, err := cc.Get(ctx, key).Result()
		assert.NoError(t, err)
		assert.Equal(t, "v", got, "data survives a pause")
	}, 5*time.Second, 20*time.Millisecond)
}

// waitFlaggedFail waits until observer has flagged target as failed (FAIL,
// not just PFAIL), which takes about one cluster-node-timeout.
func waitFlaggedFail(t *testing.T, observer, target *Server) {
	t.Helper()
	flagged := regexp.MustCompile(regexp.QuoteMeta(target.Addr()) + `@\d+\S* master,fail `)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		nodes, err := observer.Do("CLUSTER", "NODES")
		require.NoError(t, err)
		assert.Regexp(t, flagged, nodes)
	}, 10*time.Second, 50*time.Millisecond)
}
