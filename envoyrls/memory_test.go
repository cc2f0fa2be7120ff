package envoyrls_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

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
//
// The values' window must not end during the flood: a key whose window has
// ended is fresh, and the limiter forgets a fresh idle key (nothing is lost)
// rather than evicting it, so it is neither held nor counted as evicted, and
// the windows' counts of an ended window make room for new ones. With a
// minute's window, a flood of 25–35 s (the race detector, a loaded 2-core
// machine) saw its window end in about half the runs, and fell short of
// the evictions by the keys so forgotten (161 and 410 of them). A day's window ends within a flood only at midnight UTC; then
// the flood runs again, on a fresh limiter, within the next day.
func TestFloodOfLongValuesHeldWithinTheBound(t *testing.T) {
	for attempt := 1; ; attempt++ {
		// A second's margin either side for the limiter's clock (Redis
		// TIME's) not quite the test's.
		day := func(margin time.Duration) int64 { return time.Now().Add(margin).Unix() / 86400 }
		first, last := day(-time.Second), attempt == 2 // a second flood is checked whatever the clock
		if floodOfLongValues(t, func() bool { return !last && day(time.Second) != first }) {
			return
		}
		t.Log("the day's window ended during the flood: again, within the next day")
	}
}

// floodOfLongValues runs the flood on a fresh limiter and checks it, unless
// ended reports that the values' window ended meanwhile (then it returns
// false).
func floodOfLongValues(t *testing.T, ended func() bool) bool {
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
    rate_limit: {unit: day, requests_per_unit: 100}
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
	longKeys, untracked := r.svc.LongKeys(), r.svc.CountStats().Untracked
	if ended() {
		return false
	}
	t.Logf("%d values of %d bytes: %d keys held (max %d), %d evicted, %d long names digested; heap grew %d KiB (%d bytes a key held); breaker %+v",
		values, valueBytes, st.Keys, maxKeys, st.Evictions, longKeys, grown/1024, grown/int64(max(st.Keys, 1)), st.BreakerCounts)
	assert.LessOrEqual(t, st.Keys, maxKeys+256, "held within MaxKeys (give or take a key a shard)")
	assert.EqualValues(t, values, uint64(st.Keys)+st.Evictions, "every key made is held, or evicted and counted")
	assert.EqualValues(t, values, longKeys, "every name digested")
	assert.EqualValues(t, values-maxKeys, untracked, "the windows' counts held within MaxCounts, the rest decided by the limiter alone")
	// Were the values kept, MaxKeys of them would take 8 MB; the bound is a
	// quarter of that.
	assert.Less(t, grown, int64(maxKeys*valueBytes/4), "the heap holds short counters, not the values")
	return true
}
