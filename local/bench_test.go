package local

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The decision benchmarks pass a precomputed time, as x/time/rate's AllowN
// takes one: they measure the decision, not the clock.

var benchLimit = limit.PerSecond(1_000_000_000).WithBurst(1_000_000_000)

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	return keys
}

func populated(b *testing.B, keys []string) *Engine {
	e := newEngine(b, Config{MaxKeys: 2 * len(keys)})
	for _, k := range keys {
		if _, err := e.AllowN(t0, k, benchLimit, 1); err != nil {
			b.Fatal(err)
		}
	}
	return e
}

var keyCounts = []int{1, 10_000, 1_000_000}

func BenchmarkAllow(b *testing.B) {
	for _, n := range keyCounts {
		keys := benchKeys(n)
		e := populated(b, keys)
		b.Run(fmt.Sprintf("serial/keys=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			now := t0
			for i := 0; b.Loop(); i++ {
				now++
				_, _ = e.AllowN(now, keys[i%n], benchLimit, 1)
			}
		})
		b.Run(fmt.Sprintf("parallel/keys=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1) * 7919)
				now := t0
				for pb.Next() {
					i++
					now++
					_, _ = e.AllowN(now, keys[i%n], benchLimit, 1)
				}
			})
		})
	}
}

// BenchmarkTracked is the same decision with spend tracking on, as the
// hybrid limiter runs it.
func BenchmarkTracked(b *testing.B) {
	keys := benchKeys(10_000)
	e := newEngine(b, Config{TrackSpend: true})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		now := t0
		var buf []Spend
		for pb.Next() {
			i++
			now++
			_, _ = e.AllowN(now, keys[i%len(keys)], benchLimit, 1)
			if i%100_000 == 0 {
				buf = e.TakeSpend(buf[:0])
			}
		}
	})
}

func BenchmarkAlgorithms(b *testing.B) {
	for _, alg := range limit.Algorithms {
		lim := limit.PerSecond(100_000).WithAlgorithm(alg)
		b.Run(alg.String(), func(b *testing.B) {
			e := newEngine(b, Config{})
			b.ReportAllocs()
			now := t0
			for b.Loop() {
				now += 1000
				_, _ = e.AllowN(now, "user:1", lim, 1)
			}
		})
	}
}

// BenchmarkXTimeRate is the baseline: x/time/rate on one limiter, and the
// common per-key pattern of a map of limiters behind a sync.RWMutex.
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("single/serial", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e9), 1e9)
		b.ReportAllocs()
		now := time.Unix(0, t0)
		for b.Loop() {
			now = now.Add(1)
			l.AllowN(now, 1)
		}
	})
	keys := benchKeys(10_000)
	m := newRWMutexMap(rate.Limit(1e9), 1e9)
	for _, k := range keys {
		m.allow(k, time.Unix(0, t0))
	}
	b.Run("map-rwmutex/keys=10000/serial", func(b *testing.B) {
		b.ReportAllocs()
		now := time.Unix(0, t0)
		for i := 0; b.Loop(); i++ {
			now = now.Add(1)
			m.allow(keys[i%len(keys)], now)
		}
	})
	b.Run("map-rwmutex/keys=10000/parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seq atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1) * 7919)
			now := time.Unix(0, t0)
			for pb.Next() {
				i++
				now = now.Add(1)
				m.allow(keys[i%len(keys)], now)
			}
		})
	})
}

// rwMutexMap is the common per-key pattern (a map under an RWMutex), done right (double-checked
// creation): a map of *rate.Limiter behind a sync.RWMutex.
type rwMutexMap struct {
	mu       sync.RWMutex
	limiters map[string]*rate.Limiter
	r        rate.Limit
	burst    int
}

func newRWMutexMap(r rate.Limit, burst int) *rwMutexMap {
	return &rwMutexMap{limiters: map[string]*rate.Limiter{}, r: r, burst: burst}
}

func (m *rwMutexMap) allow(key string, now time.Time) bool {
	m.mu.RLock()
	l, ok := m.limiters[key]
	m.mu.RUnlock()
	if !ok {
		m.mu.Lock()
		if l, ok = m.limiters[key]; !ok {
			l = rate.NewLimiter(m.r, m.burst)
			m.limiters[key] = l
		}
		m.mu.Unlock()
	}
	return l.AllowN(now, 1)
}

// heapAfterGC returns the live heap in bytes.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// millionKeysHeap measures the heap a million token-bucket keys hold,
// including the engine's own copies of the keys.
func millionKeysHeap(t testing.TB) (perKey float64, total uint64) {
	const n = 1_000_000
	keys := benchKeys(n) // the caller's keys, measured out: the engine keeps copies
	before := heapAfterGC()
	e := newEngine(t, Config{MaxKeys: 2 * n, TrackSpend: true})
	for _, k := range keys {
		if _, err := e.AllowN(t0, k, limit.PerSecond(100), 1); err != nil {
			t.Fatal(err)
		}
	}
	e.TakeSpend(nil)
	after := heapAfterGC()
	if e.Len() != n {
		t.Fatalf("holds %d keys, want %d", e.Len(), n)
	}
	runtime.KeepAlive(e)
	runtime.KeepAlive(keys)
	total = after - before
	return float64(total) / n, total
}

// BenchmarkMemoryPerKey reports the heap a key costs, measured over a million.
func BenchmarkMemoryPerKey(b *testing.B) {
	for b.Loop() {
		perKey, total := millionKeysHeap(b)
		b.ReportMetric(perKey, "B/key")
		b.ReportMetric(float64(total)/(1<<20), "MiB/1M-keys")
	}
}

// nodeMemory is what an engine holds configured as an Async node's is
// (hybrid.Config's defaults: MaxKeys keys, spend tracked, no spend kept
// for evicted keys): once full of n keys, and once as many new keys again
// have evicted as many (a flood of new clients), each key a short
// name ("user:123456", as the caller's keys, measured out); and the most
// the heap held meanwhile, garbage not yet collected included, which Go's
// collector (GOGC=100) lets grow to about twice what is live.
type nodeMemory struct {
	heldPerKey, floodPerKey float64 // the live heap after GC, per key held
	peak                    uint64  // the heap's largest size, sampled every 64Ki decisions
}

func measureNodeMemory(t testing.TB, n int) nodeMemory {
	keys := benchKeys(2 * n)
	before := heapAfterGC()
	e := newEngine(t, Config{MaxKeys: n, TrackSpend: true})
	var m nodeMemory
	var ms runtime.MemStats
	fill := func(keys []string, at int64) {
		for i, k := range keys {
			if _, err := e.AllowN(at, k, limit.PerSecond(100), 1); err != nil {
				t.Fatal(err)
			}
			if i%(64<<10) == 0 {
				runtime.ReadMemStats(&ms)
				m.peak = max(m.peak, ms.HeapAlloc-before)
			}
		}
		if e.Len() != n {
			t.Fatalf("holds %d keys, want %d", e.Len(), n)
		}
	}
	fill(keys[:n], t0)
	m.heldPerKey = float64(heapAfterGC()-before) / float64(n)
	fill(keys[n:], t0+int64(time.Second)) // spent a second earlier: the evicted are fresh, recorded all the same
	m.floodPerKey = float64(heapAfterGC()-before) / float64(n)
	runtime.KeepAlive(e)
	runtime.KeepAlive(keys)
	return m
}

// BenchmarkMemoryAsyncNode reports nodeMemory at DefaultMaxKeys: the
// figures docs/benchmarks.md gives for a node's keys.
func BenchmarkMemoryAsyncNode(b *testing.B) {
	for b.Loop() {
		m := measureNodeMemory(b, DefaultMaxKeys)
		b.ReportMetric(m.heldPerKey, "B/key-held")
		b.ReportMetric(m.floodPerKey, "B/key-flooded")
		b.ReportMetric(float64(m.peak)/(1<<20), "MiB-heap-peak")
	}
}

// TestMemoryPerKeyUnderAFlood holds the engine to its memory budget, the
// size hybrid.Config's MaxKeys documents for an Async node's keys: about
// 155 bytes a key held, and about 50 more once keys are evicted (the records
// of keys evicted, 32, and the key table's queue, which a flood of new keys
// leaves longer than the keys it holds until it reuses its front) (the
// measured figures are in docs/benchmarks.md, "Memory: a million keys";
// the bounds below leave a small margin over them). A quarter of the
// default MaxKeys, so that the suite stays quick (a million keys took 39 s
// under the race detector); BenchmarkMemoryAsyncNode measures the default.
func TestMemoryPerKeyUnderAFlood(t *testing.T) {
	m := measureNodeMemory(t, DefaultMaxKeys/4)
	t.Logf("%.1f B/key held, %.1f B/key after a flood; the heap peaked at %d MiB", m.heldPerKey, m.floodPerKey, m.peak>>20)
	assert.LessOrEqual(t, m.heldPerKey, 160.0, "held")
	assert.LessOrEqual(t, m.floodPerKey, 212.0, "after a flood")
}
