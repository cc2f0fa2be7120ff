package hybrid

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// The hot path, as a service calls it: the clock read inside, the reconciler
// running every 1 ms over 10,000 hot keys (every key the benchmark touches is
// reported each round). Baseline: the local engine's own decision with the
// same clock read, in the same run.
//
//	go test -run '^$' -bench . -benchmem ./hybrid/

const benchKeys = 10_000

var benchInterval = time.Millisecond

var benchLim = PerSecond(1_000_000_000).WithBurst(1_000_000_000)

func keys() []string {
	ks := make([]string, benchKeys)
	for i := range ks {
		ks[i] = fmt.Sprintf("user:%d", i)
	}
	return ks
}

// asyncLimiter is a limiter reconciling every 1 ms, its keys populated.
func asyncLimiter(b *testing.B, srv *redistest.Server, ks []string) *Limiter {
	c := srv.Client(b, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = 200 * time.Millisecond })
	l, err := New(Config{Redis: c, SyncInterval: benchInterval, BreakerOpenFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	for _, k := range ks {
		if _, err := l.Allow(bg, k, benchLim); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

func run(b *testing.B, ks []string, decide func(key string)) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			decide(ks[i%len(ks)])
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seq atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1) * 7919)
			for pb.Next() {
				i++
				decide(ks[i%len(ks)])
			}
		})
	})
}

func BenchmarkHotPath(b *testing.B) {
	ks := keys()
	b.Run("local-engine", func(b *testing.B) {
		e, err := local.New(local.Config{TrackSpend: true})
		if err != nil {
			b.Fatal(err)
		}
		run(b, ks, func(k string) { _, _ = e.AllowN(time.Now().UnixNano(), k, benchLim, 1) })
	})
	b.Run("async", func(b *testing.B) {
		srv := redistest.Start(b)
		l := asyncLimiter(b, srv, ks)
		// The same shape of check as the degraded run's, so the two compare.
		// (Not Source == Local: when the rounds of 10,000 keys every 1 ms
		// outrun Redis on a small machine, the breaker may open for a moment.)
		run(b, ks, func(k string) {
			if d, _ := l.Allow(bg, k, benchLim); d.Source == Remote {
				b.Fatal("an async decision waited on Redis")
			}
		})
	})
	b.Run("degraded", func(b *testing.B) {
		srv := redistest.Start(b)
		l := asyncLimiter(b, srv, ks)
		srv.Pause() // the breaker opens on the stopped Redis; it stays open for the run
		b.Cleanup(srv.Resume)
		for !l.Degraded() {
			time.Sleep(time.Millisecond)
		}
		run(b, ks, func(k string) {
			if d, _ := l.Allow(bg, k, benchLim); d.Source != Degraded {
				b.Fatal("not degraded")
			}
		})
	})
}

// BenchmarkAsyncLatency records every decision's latency while the
// reconciler runs, and reports the median and the tail.
func BenchmarkAsyncLatency(b *testing.B) {
	ks := keys()
	srv := redistest.Start(b)
	l := asyncLimiter(b, srv, ks)
	lat := make([]time.Duration, 0, 1<<20)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		_, _ = l.Allow(bg, ks[i%len(ks)], benchLim)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) }
	b.ReportMetric(q(0.5), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.ReportMetric(q(0.999), "p999-ns")
}
