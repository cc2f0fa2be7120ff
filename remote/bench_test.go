package remote

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The benchmarks run against one private redis-server, the same for every
// contender, in one run: go test -run '^$' -bench . -benchmem ./remote/

func benchClient(b *testing.B) *redis.Client {
	srv := redistest.Start(b)
	return srv.Client(b, func(o *redis.Options) { o.PoolSize = 32 })
}

// BenchmarkSyncAllow is one synchronous decision (one script, one round trip)
// against go-redis/redis_rate's Allow on the same Redis: serial, and with 16
// goroutines deciding at once.
func BenchmarkSyncAllow(b *testing.B) {
	c := benchClient(b)
	s, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Ping(bg); err != nil {
		b.Fatal(err)
	}
	rr := redis_rate.NewLimiter(c)
	ours := limit.PerSecond(1_000_000_000).WithBurst(1_000_000_000)
	theirs := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Second}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	contenders := []struct {
		name   string
		decide func(key string) error
	}{
		{"hybridlimit", func(key string) error { _, err := s.AllowN(bg, key, ours, 1); return err }},
		{"redis_rate", func(key string) error { _, err := rr.Allow(bg, key, theirs); return err }},
	}
	for _, c := range contenders {
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := c.decide(keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/goroutines=16", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8) // 8 × GOMAXPROCS (2) = 16 goroutines
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 101
				for pb.Next() {
					i++
					if err := c.decide(keys[i%len(keys)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReconcile applies batches of reports, one pipeline per batch, and
// reports keys reconciled per second.
func BenchmarkReconcile(b *testing.B) {
	c := benchClient(b)
	s, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Ping(bg); err != nil {
		b.Fatal(err)
	}
	lim := limit.PerSecond(1000)
	for _, size := range []int{1, 100, 1000, 10000} {
		rs := reports(size, lim)
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			var r Round
			start := time.Now()
			for b.Loop() {
				for i := range rs {
					rs[i].Total++ // new spend every round, as in use
				}
				if err := s.Reconcile(bg, rs, &r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)*float64(b.N)/time.Since(start).Seconds(), "keys/s")
		})
	}
}
