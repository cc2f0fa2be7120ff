package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The key table evicts the least recently used key: in the order keys came,
// each key used since its last pass given a second chance; a key removed
// and added again counts from its new place.
func TestKeyTableEvictsTheLeastRecentlyUsed(t *testing.T) {
	var evicted []string
	tab := newKeyTable(3, func(key string, _ *entry) { evicted = append(evicted, key) })
	add := func(key string) { tab.Add(key, &entry{}) }
	add("a")
	add("b")
	add("c")
	tab.Get("a")
	add("d") // a was used: b goes
	add("e") // c
	assert.Equal(t, []string{"b", "c"}, evicted)
	tab.Get("d")
	add("f") // a (its second chance spent), not d
	assert.Equal(t, []string{"b", "c", "a"}, evicted)
	tab.Remove("e")
	add("e")
	add("g") // d had its chance; f is next
	assert.Equal(t, []string{"b", "c", "a", "e", "f"}, evicted)
	assert.Equal(t, 3, tab.Len())
	for _, k := range []string{"d", "e", "g"} {
		_, ok := tab.Peek(k)
		assert.True(t, ok, k)
	}
}

// A sweep forgets a fresh key only if nothing was asked of it since the
// sweep before, also where no spend is tracked: a key in use is not made
// again between two of its requests.
func TestSweepKeepsAKeyUsedSinceTheLastSweep(t *testing.T) {
	e := newEngine(t, Config{Shards: 1})
	lim := limit.PerSecond(1000)
	for _, key := range []string{"busy", "idle", "busy"} {
		_, err := e.AllowN(t0, key, lim, 1)
		require.NoError(t, err)
	}
	at := t0 + int64(time.Second) // both fresh again
	assert.Equal(t, 1, e.Sweep(at, 256), "the key not asked for since it was made")
	assert.Equal(t, 1, e.Len())
	_, err := e.AllowN(at, "busy", lim, 1)
	require.NoError(t, err)
	at += int64(time.Second)
	assert.Zero(t, e.Sweep(at, 256), "busy was asked for since the last sweep")
	at += int64(time.Second)
	assert.Equal(t, 1, e.Sweep(at, 256), "and is forgotten once idle for a sweep")
	assert.Zero(t, e.Len())
}
