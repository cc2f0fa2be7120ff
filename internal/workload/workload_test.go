package workload

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs()
	goleak.VerifyTestMain(m)
}

// The draw follows 1/k^s: rank frequencies over many draws are within a few
// percent of the distribution's, for a skewed and a uniform draw.
func TestZipfDrawsItsDistribution(t *testing.T) {
	for _, s := range []float64{0, 0.8, 1.1} {
		z, err := NewZipf(1000, s)
		require.NoError(t, err)
		sum := 0.0
		for k := range z.Keys() {
			sum += z.P(k)
		}
		assert.InDelta(t, 1, sum, 1e-9, "s=%v: probabilities sum to one", s)
		assert.InDelta(t, math.Pow(2, -s), z.P(1)/z.P(0), 1e-9, "s=%v: rank 2 over rank 1", s)

		r := rand.New(rand.NewPCG(1, 2))
		const draws = 400_000
		counts := make([]int, z.Keys())
		for range draws {
			counts[z.Draw(r)]++
		}
		for _, k := range []int{0, 1, 9, 99} {
			want := z.P(k) * draws
			assert.InDelta(t, want, float64(counts[k]), 5*math.Sqrt(want)+1, "s=%v: rank %d", s, k+1)
		}
	}
}

func TestZipfOver(t *testing.T) {
	z, err := NewZipf(100_000, 1.1)
	require.NoError(t, err)
	// W1: 20,000/s over 100,000 keys at s = 1.1, 10/s a key. Rank k gets
	// 20,000·P(k); the ranks above 10/s are the keys an exact limiter denies.
	over := z.Over(20_000, 10)
	assert.Greater(t, z.P(over-1)*20_000, 10.0)
	assert.LessOrEqual(t, z.P(over)*20_000, 10.0)
	u, err := NewZipf(100, 0)
	require.NoError(t, err)
	assert.Zero(t, u.Over(100, 10), "uniform: 1/s a key")
	assert.Equal(t, 100, u.Over(10_000, 10))
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		n    int
		s    float64
		want string
	}{
		{0, 1, "workload: 0 keys: want 1 to 10000000"},
		{MaxKeys + 1, 1, "workload: 10000001 keys"},
		{10, -1, "workload: zipf exponent -1: want 0 (uniform) or more"},
		{10, math.NaN(), "workload: zipf exponent NaN"},
	} {
		_, err := NewZipf(tc.n, tc.s)
		assert.ErrorContains(t, err, tc.want)
	}
	_, err := Run(context.Background(), Config{})
	assert.ErrorContains(t, err, "workload: Config.Client and Config.Admin are required")
	client := func() redis.UniversalClient { return nil }
	admin := redis.NewClient(&redis.Options{}) // never dialled: the config is refused first
	defer admin.Close()
	_, err = Run(context.Background(), Config{Client: client, Admin: admin, Load: Load{Rate: -1}})
	assert.ErrorContains(t, err, "workload: rate -1")
	_, err = Run(context.Background(), Config{Client: client, Admin: admin, Duration: -time.Second})
	assert.ErrorContains(t, err, "workload: negative duration (warmup 0s, duration -1s")
	tot := Drive(context.Background(), nil, nil, Load{}, time.Second)
	assert.ErrorContains(t, tot.FirstError, "workload: drive 0 nodes for 1s")
}

func TestHistogram(t *testing.T) {
	var h Histogram
	assert.Zero(t, h.Quantile(0.5))
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	var o Histogram
	o.Record(time.Second)
	h.Merge(&o)
	assert.EqualValues(t, 1001, h.Count())
	assert.Equal(t, time.Second, h.Max())
	assert.Equal(t, time.Second, h.Quantile(1))
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond} {
		got := h.Quantile(q)
		assert.InEpsilon(t, float64(want), float64(got), 1.0/16, "q=%v: %v", q, got)
		assert.LessOrEqual(t, got, want, "the lower bound of the bucket")
	}
	assert.EqualValues(t, 1, h.Over(time.Millisecond+100*time.Microsecond), "only the second")
	for _, d := range []time.Duration{0, 1, 15, 16, 17, 31, 32, 33, 1000, time.Hour} {
		b := bucketOf(d)
		assert.LessOrEqual(t, lowerBound(b), d, "%v", d)
		assert.Greater(t, lowerBound(b+1), d, "%v", d)
	}
}

func TestParseInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n" +
		"# Memory\r\nused_memory:123456\r\nused_memory_human:120.56K\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=30,usec=90,usec_per_call=3.00\r\ncmdstat_info:calls=7,usec=9\r\ncmdstat_config|resetstat:calls=1,usec=1\r\n"
	c := ParseInfo(info)
	assert.Equal(t, 3750*time.Millisecond, c.CPU, "user and sys, not the children")
	assert.EqualValues(t, 40, c.Calls, "the harness's INFO and CONFIG left out")
	assert.EqualValues(t, 10, c.Scripts)
	assert.EqualValues(t, 123456, c.Memory)
	d := c.Sub(RedisCounters{CPU: time.Second, Calls: 15, Scripts: 5, ByCommand: map[string]int64{"evalsha": 5, "hset": 10}})
	assert.Equal(t, RedisCost{CPU: 2750 * time.Millisecond, Calls: 25, Scripts: 5, ByCommand: map[string]int64{"evalsha": 5, "hset": 20}}, d)
}

// A short run of each mode against a private Redis: the decisions offered
// are made, some are denied (a key limit far below the hot keys' rates),
// Redis's work is counted, every round is recorded, and a Sync run costs
// Redis at least a script per decision where Async costs less.
func TestRunMeasuresBothModes(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	results := map[hybrid.Mode]*Result{}
	for _, mode := range []hybrid.Mode{hybrid.Async, hybrid.Sync} {
		cfg := Config{
			Load:  Load{Keys: 1000, Zipf: 1.1, Rate: 2000, Seed: 7},
			Nodes: 2, Mode: mode, Interval: 10 * time.Millisecond, Duration: time.Second,
			Prefix: mode.String() + ":", Admin: admin,
			Client: func() redis.UniversalClient { return srv.Client(t) },
			Configure: func(_ int, c *hybrid.Config) {
				c.RedisTimeout = time.Second // a loaded machine under the race detector
			},
		}
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		t.Log(res)
		assert.Greater(t, res.Decisions, int64(1000), "most of the 2,000 offered")
		assert.Zero(t, res.Errors)
		assert.Less(t, res.Admitted, res.Decisions, "the hot keys are denied")
		assert.Greater(t, res.Admitted, res.Decisions/4)
		assert.Equal(t, res.Decisions, res.Sources[0]+res.Sources[1]+res.Sources[2])
		assert.Positive(t, res.Redis.CPU)
		assert.Positive(t, res.Redis.Calls)
		assert.Positive(t, res.Rounds.Count)
		assert.Positive(t, res.Rounds.Max)
		assert.EqualValues(t, res.Decisions, res.Latency.Count())
		results[mode] = res
	}
	sync, async := results[hybrid.Sync], results[hybrid.Async]
	assert.GreaterOrEqual(t, sync.Redis.Scripts, sync.Sources[hybrid.Remote], "a script for every decision made in Redis")
	assert.Positive(t, sync.Sources[hybrid.Remote])
	assert.Less(t, async.ScriptsPerDecision(), 1.0, "Async decides in memory: fewer scripts than decisions")
	assert.Positive(t, results[hybrid.Async].Close.Calls, "closing gives the contested keys' shares back and leaves the fleet")
}

// A pacer that wakes after the load's end (a loaded machine: its first
// tick came late) still sends what the load owed up to the end, rather
// than nothing: 100,000 a second for 1 ms, the first tick at 2 ms.
func TestDriveSendsWhatWasOwedWhenItsTickIsLate(t *testing.T) {
	keys, err := NewKeySet(10, 0)
	require.NoError(t, err)
	allow := func(context.Context, string) (bool, error) { return true, nil }
	tot := Drive(context.Background(), []AllowFunc{allow}, keys, Load{Rate: 100_000, Tick: 2 * time.Millisecond, Seed: 1}, time.Millisecond)
	assert.InDelta(t, 100, tot.Decisions+tot.Shed, 1, "decided %d, shed %d", tot.Decisions, tot.Shed)
}
