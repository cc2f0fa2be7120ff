package local

// keyTable is a shard's keys: a plain map from each key to the entry of its
// first limit, holding at most size keys. When it is full, the key used
// least recently, as a second-chance queue tells it, gives way.
//
// The queue holds the keys in the order they came; every lookup sets the
// key's used bit (flagUsed on its entry) and moves nothing. Evicting takes
// the key at the head of the queue: one used since it was last there goes
// to the back with its bit cleared (a second chance), the first one not
// used is evicted. So a key is evicted only after every key that came
// before it was either evicted or used again: least recently used first,
// with recency known to one pass of the queue, for a bit set on each
// decision instead of a list element moved (a map lookup against the
// LRU's map, list and element), and a key's place in the queue (16 bytes)
// against a list element (80).
//
// The table belongs to its shard and is used under the shard's lock.
type keyTable struct {
	m       map[string]*entry
	queue   []string // every key held, once, in order of its last pass, from head
	head    int      // queue[:head] is spent
	size    int
	onEvict func(key string, en *entry) // told of every key that leaves: evicted or removed
}

func newKeyTable(size int, onEvict func(string, *entry)) *keyTable {
	return &keyTable{m: make(map[string]*entry), size: max(size, 1), onEvict: onEvict}
}

// Len returns the number of keys held.
func (t *keyTable) Len() int { return len(t.m) }

// Peek returns key's entry without marking it used.
func (t *keyTable) Peek(key string) (*entry, bool) {
	en, ok := t.m[key]
	return en, ok
}

// Get returns key's entry and marks it used.
func (t *keyTable) Get(key string) (*entry, bool) {
	en, ok := t.m[key]
	if ok && !en.has(flagUsed) {
		en.set(flagUsed)
	}
	return en, ok
}

// Add adds key (not held) with its entry at the back of the queue, first
// evicting the least recently used key if the table is full. It reports
// whether it evicted one.
func (t *keyTable) Add(key string, en *entry) (evicted bool) {
	if len(t.m) >= t.size {
		_, _, evicted = t.RemoveOldest()
	}
	t.m[key] = en
	t.push(key)
	return evicted
}

// Remove removes key, telling onEvict, and reports whether it was held. It
// looks for the key's place in the queue, one by one: for a key forgotten
// (a Reset), not for the decisions' path.
func (t *keyTable) Remove(key string) bool {
	en, ok := t.m[key]
	if !ok {
		return false
	}
	for i := t.head; i < len(t.queue); i++ {
		if t.queue[i] == key {
			copy(t.queue[i:], t.queue[i+1:])
			t.queue[len(t.queue)-1] = ""
			t.queue = t.queue[:len(t.queue)-1]
			break
		}
	}
	delete(t.m, key)
	t.onEvict(key, en)
	return true
}

// RemoveOldest evicts the least recently used key, telling onEvict, and
// returns it; ok is false when the table is empty.
func (t *keyTable) RemoveOldest() (key string, en *entry, ok bool) {
	for t.head < len(t.queue) {
		key = t.pop()
		en = t.m[key]
		if en.has(flagUsed) {
			en.clear(flagUsed)
			t.push(key)
			continue
		}
		delete(t.m, key)
		t.onEvict(key, en)
		return key, en, true
	}
	return "", nil, false
}

// Oldest returns the key at the head of the queue without moving it: the
// next one RemoveOldest looks at.
func (t *keyTable) Oldest() (key string, en *entry, ok bool) {
	if t.head == len(t.queue) {
		return "", nil, false
	}
	key = t.queue[t.head]
	return key, t.m[key], true
}

// Requeue moves the key at the head of the queue to the back, clearing its
// used bit: what a pass over it does.
func (t *keyTable) Requeue() {
	if t.head < len(t.queue) {
		key := t.pop()
		t.m[key].clear(flagUsed)
		t.push(key)
	}
}

func (t *keyTable) pop() string {
	key := t.queue[t.head]
	t.queue[t.head] = ""
	t.head++
	return key
}

func (t *keyTable) push(key string) {
	if t.head > 0 && t.head >= len(t.queue)/2 && len(t.queue) == cap(t.queue) {
		// Reuse the spent front rather than grow.
		n := copy(t.queue, t.queue[t.head:])
		clear(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
	t.queue = append(t.queue, key)
}
