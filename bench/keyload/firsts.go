package keyload

import (
	"math"
	"time"
)

// Windows are the look-back windows of the first-request figures.
var Windows = [2]time.Duration{10 * time.Second, time.Minute}

// Firsts counts the requests of a stream's measured part that are their
// key's first on their node within each of Windows: no request of the key
// reached that node in the window before it. A protocol that decides at
// memory speed only from a share the node already holds cannot answer such
// a request from memory unless the node keeps the key's share longer than
// the window (or its even split of the limit holds the request).
type Firsts struct {
	// Requests is the measured part's requests.
	Requests int64
	// InRun counts, for each window, the first requests looking back no
	// earlier than the start of the warm-up: what the nodes of this run met
	// first (a key not asked for since the run began is new to them).
	InRun [len(Windows)]int64
	// Steady counts them looking back over the stream's History as well:
	// the same traffic after it has run for long (exact for a window no
	// longer than History).
	Steady [len(Windows)]int64
}

// Share is count over the requests.
func (f Firsts) Share(count int64) float64 {
	if f.Requests == 0 {
		return 0
	}
	return float64(count) / float64(f.Requests)
}

// never marks a (node, key) not asked for yet.
const never = math.MinInt32

// tracker keeps when each key was last asked for on each node, in
// milliseconds from the stream's first tick, and counts first requests.
type tracker struct {
	keys     int
	last     []int32 // node*keys + key
	origin   time.Duration
	runStart int32 // the warm-up's start, in the tracker's milliseconds
	windows  [len(Windows)]int32
	f        Firsts
}

func newTracker(nodes, keys int, origin, runStart time.Duration) *tracker {
	t := &tracker{keys: keys, last: make([]int32, nodes*keys), origin: origin}
	for i := range t.last {
		t.last[i] = never
	}
	t.runStart = t.ms(runStart)
	for i, w := range Windows {
		t.windows[i] = int32(w / time.Millisecond)
	}
	return t
}

func (t *tracker) ms(at time.Duration) int32 { return int32((at - t.origin) / time.Millisecond) }

// see records r, in order of At, counting it if it is in the measured part
// (At >= 0).
func (t *tracker) see(r Request) {
	i := int(r.Node)*t.keys + int(r.Key)
	now, prev := t.ms(r.At), t.last[i]
	t.last[i] = now
	if r.At < 0 {
		return
	}
	t.f.Requests++
	for w, win := range t.windows {
		if prev == never || now-prev >= win {
			t.f.Steady[w]++
		}
		if prev == never || prev < t.runStart || now-prev >= win {
			t.f.InRun[w]++
		}
	}
}
