package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
