package hybrid

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// What a Go programmer writes instead of this library, and the first thing
// a user compares it with: a map of golang.org/x/time/rate limiters behind a
// sync.RWMutex, each decision calling Allow (which reads the clock). Beside
// it, Limiter.Allow in Async mode with Redis healthy, in LocalOnly mode and
// on a degraded node (Redis stopped, the breaker open), each on 10,000
// existing keys whose limit is never reached, so every decision takes the
// admit path.
//
//	go test -run '^$' -bench 'Pattern' -benchmem -count 5 ./hybrid/
//
// BenchmarkPattern/serial/pattern and .../parallel/pattern are the pattern
// alone. Each other line runs its limiter and the pattern in alternating
// blocks of decisions within the one benchmark, so that both see the same
// load on a shared machine: ns/op is the limiter's, pattern-ns/op the
// pattern's measured beside it, and x-pattern their ratio (below 1: the
// limiter is faster); the cpu- figures are the same by the CPU time of the
// deciding threads, which a busy machine moves less (paired). allocs/op
// counts both (the pattern allocates nothing on an existing key). parallel
// runs GOMAXPROCS goroutines.
//
// BenchmarkPacedLatency times single decisions of the same four, one every
// 10 µs on one goroutine (paced traffic, not a tight loop), and reports the
// median and the tail; clock-floor is the timing itself around no decision.

// patternMap is the pattern, double-checked creation and all.
type patternMap struct {
	mu       sync.RWMutex
	limiters map[string]*rate.Limiter
}

func (m *patternMap) allow(key string) bool {
	m.mu.RLock()
	l, ok := m.limiters[key]
	m.mu.RUnlock()
	if !ok {
		m.mu.Lock()
		if l, ok = m.limiters[key]; !ok {
			l = rate.NewLimiter(rate.Limit(benchLim.Rate), int(benchLim.Burst))
			m.limiters[key] = l
		}
		m.mu.Unlock()
	}
	return l.Allow()
}

// patternContenders returns the pattern and the three limiters, their keys
// populated, as functions deciding one request on a key.
func patternContenders(b *testing.B, ks []string) (pattern func(string), limiters []contender) {
	var offPath atomic.Int64
	m := &patternMap{limiters: make(map[string]*rate.Limiter)}
	for _, k := range ks {
		m.allow(k)
	}
	local, err := New(Config{Mode: LocalOnly})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = local.Close(context.Background()) })
	for _, k := range ks {
		if _, err := local.Allow(bg, k, benchLim); err != nil {
			b.Fatal(err)
		}
	}
	async := patternAsync(b, ks)
	degraded := patternAsync(b, ks)
	srv := degraded.srv
	srv.Pause() // the breaker opens on the stopped Redis; it stays open for the run
	b.Cleanup(srv.Resume)
	for !degraded.l.Degraded() {
		time.Sleep(time.Millisecond)
	}
	// A decision not admitted, or not made where the benchmark says, is
	// counted (b.Fatal would end only the goroutine calling it) and failed
	// at the end of the benchmark.
	decide := func(l *Limiter, want Source) func(string) { return decider(l, want, &offPath) }
	b.Cleanup(func() {
		if n := offPath.Load(); n > 0 {
			b.Errorf("%d decisions refused or made elsewhere than the benchmark measures", n)
		}
	})
	return func(k string) {
			if !m.allow(k) {
				offPath.Add(1)
			}
		}, []contender{
			{"async", decide(async.l, Local)},
			{"localonly", decide(local, Local)},
			{"degraded", decide(degraded.l, Degraded)},
		}
}

// decider returns a function deciding one request on a key with l, counting
// in offPath a decision refused or not made from where want says. It is not
// inlined: the compiler compiles the closure of a function inlined at its
// call site without inlining the calls in it (Allow, atomic.Add), which no
// caller's own code meets.
//
//go:noinline
func decider(l *Limiter, want Source, offPath *atomic.Int64) func(string) {
	return func(k string) {
		if d, err := l.Allow(bg, k, benchLim); err != nil || !d.Allowed || d.Source != want {
			offPath.Add(1)
		}
	}
}

type contender struct {
	name   string
	decide func(key string)
}

type limiterOn struct {
	l   *Limiter
	srv *redistest.Server
}

// patternAsync is an Async limiter as a service runs one (the default
// SyncInterval) on a private redis-server, its keys populated. Its Redis
// calls may take a second before the breaker counts them failed, so that a
// busy machine does not turn the Async run into a degraded one.
func patternAsync(b *testing.B, ks []string) limiterOn {
	srv := redistest.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = 2 * time.Second })
	l, err := New(Config{Redis: c, RedisTimeout: time.Second, BreakerOpenFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	for _, k := range ks {
		if _, err := l.Allow(bg, k, benchLim); err != nil {
			b.Fatal(err)
		}
	}
	return limiterOn{l: l, srv: srv}
}

func BenchmarkPattern(b *testing.B) {
	ks := keys()
	pattern, limiters := patternContenders(b, ks)
	for _, par := range []bool{false, true} {
		name := "serial"
		if par {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			b.Run("pattern", func(b *testing.B) {
				b.ReportAllocs()
				b.ResetTimer()
				w, c := decisions(par, 0, b.N, ks, pattern)
				b.ReportMetric(float64(w)/float64(b.N), "ns/op")
				b.ReportMetric(float64(c)/float64(b.N), "cpu-ns/op")
			})
			for _, c := range limiters {
				b.Run(c.name, func(b *testing.B) { paired(b, par, ks, c.decide, pattern) })
			}
		})
	}
}

// pairBlock is how many decisions each side makes in turn.
const pairBlock = 8192

// paired makes b.N decisions with ours and b.N with pattern, in alternating
// blocks (which goes first alternating too), and reports each one's time per
// decision and the ratio: by the wall clock (ns/op, pattern-ns/op,
// x-pattern) and by the CPU time of the threads deciding (cpu-ns/op,
// pattern-cpu-ns/op, x-pattern-cpu), which on a busy machine leaves out the
// time others ran on our cores: the steadier ratio there. A parallel run's
// CPU time is divided by the goroutines, as its wall time is by nature.
func paired(b *testing.B, par bool, ks []string, ours, pattern func(string)) {
	b.ReportAllocs()
	b.ResetTimer()
	var wOurs, wPattern, cOurs, cPattern time.Duration
	for done, turn := 0, 0; done < b.N; turn++ {
		n := min(b.N-done, pairBlock)
		for side := range 2 {
			if (side+turn)%2 == 0 {
				w, c := decisions(par, done, n, ks, ours)
				wOurs, cOurs = wOurs+w, cOurs+c
			} else {
				w, c := decisions(par, done, n, ks, pattern)
				wPattern, cPattern = wPattern+w, cPattern+c
			}
		}
		done += n
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(b.N) }
	b.ReportMetric(per(wOurs), "ns/op")
	b.ReportMetric(per(wPattern), "pattern-ns/op")
	b.ReportMetric(float64(wOurs)/float64(wPattern), "x-pattern")
	b.ReportMetric(per(cOurs), "cpu-ns/op")
	b.ReportMetric(per(cPattern), "pattern-cpu-ns/op")
	b.ReportMetric(float64(cOurs)/float64(cPattern), "x-pattern-cpu")
}

// decisions makes n decisions on the keys from the from-th on, on one
// goroutine or spread over GOMAXPROCS (each taking runs of 64 keys in
// turn), and returns the time they took and the CPU time their threads
// spent (over the goroutines, for a parallel run).
func decisions(par bool, from, n int, ks []string, decide func(string)) (wall, cpu time.Duration) {
	start := time.Now()
	if !par {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c := threadCPU()
		for i := from; i < from+n; i++ {
			decide(ks[i%len(ks)])
		}
		return time.Since(start), threadCPU() - c
	}
	const run = 64
	var next, spent atomic.Int64
	var wg sync.WaitGroup
	procs := runtime.GOMAXPROCS(0)
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c := threadCPU()
			defer func() { spent.Add(int64(threadCPU() - c)) }()
			for {
				i := int(next.Add(run)) - run
				if i >= n {
					return
				}
				for j := i; j < min(i+run, n); j++ {
					decide(ks[(from+j)%len(ks)])
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), time.Duration(spent.Load()) / time.Duration(procs)
}

// threadCPU is the CPU time the calling thread has run
// (CLOCK_THREAD_CPUTIME_ID, exact to the nanosecond, where getrusage's
// figure lags by up to a scheduler tick); the caller locks its goroutine to
// the thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// pacedEvery is the pace of BenchmarkPacedLatency: 100,000 decisions a
// second on one goroutine.
const pacedEvery = 10 * time.Microsecond

func BenchmarkPacedLatency(b *testing.B) {
	ks := keys()
	pattern, limiters := patternContenders(b, ks)
	all := append([]contender{{"clock-floor", func(string) {}}, {"pattern", pattern}}, limiters...)
	for _, c := range all {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			base := time.Now()
			next := time.Since(base)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				next += pacedEvery
				for time.Since(base) < next {
				}
				start := time.Since(base)
				c.decide(ks[i%len(ks)])
				lat = append(lat, time.Since(base)-start)
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(0.999), "p999-ns")
		})
	}
}
