package envoyrls_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A flood of distinct 4 KB descriptor values (a path, an API key an
// attacker makes up): the counters held stay within MaxKeys, each costs the
// memory of a short name, the keys beyond are evicted and counted, the
// windows' counts stay within MaxCounts, and the heap grows by what MaxKeys
// short counters take, not by the values.
func TestFloodOfLongValuesHeldWithinTheBound(t *testing.T) {
	const (
		maxKeys     = 2_000
		maxKeyBytes = 256
		values      = 20_000
		valueBytes  = 4096
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	r := startRig(t, rdb, hybrid.Config{MaxKeys: maxKeys, MaxPending: maxKeys},
		envoyrls.Config{Rules: static(t, `
domain: d
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
`), MaxKeyBytes: maxKeyBytes, MaxCounts: maxKeys})
	ctx := context.Background()
	filler := strings.Repeat("x", valueBytes-8)
	call := func(i int) {
		resp, err := r.client.ShouldRateLimit(ctx, req("d", 0, "path="+filler+strconv.Itoa(10_000_000+i)))
		require.NoError(t, err)
		require.Equal(t, okCode, resp.GetOverallCode(), "value %d is new: admitted", i)
	}
	for i := range 100 { // connections, buffers, the engine's shards: warm
		call(i)
	}
	before := heapInUse()
	for i := 100; i < values; i++ {
		call(i)
	}
	grown := int64(heapInUse()) - int64(before)
	st := r.lim.Stats()
	t.Logf("%d values of %d bytes: %d keys held (max %d), %d evicted, %d long names digested; heap grew %d KiB (%d bytes a key held)",
		values, valueBytes, st.Keys, maxKeys, st.Evictions, r.svc.LongKeys(), grown/1024, grown/int64(max(st.Keys, 1)))
	assert.LessOrEqual(t, st.Keys, maxKeys+256, "held within MaxKeys (give or take a key a shard)")
	assert.GreaterOrEqual(t, st.Evictions, uint64(values-maxKeys-256), "the rest evicted, and counted")
	assert.EqualValues(t, values, r.svc.LongKeys(), "every name digested")
	assert.EqualValues(t, values-maxKeys, r.svc.CountStats().Untracked, "the windows' counts held within MaxCounts, the rest decided by the limiter alone")
	// Were the values kept, MaxKeys of them would take 8 MB; the bound is a
	// quarter of that.
	assert.Less(t, grown, int64(maxKeys*valueBytes/4), "the heap holds short counters, not the values")
}
