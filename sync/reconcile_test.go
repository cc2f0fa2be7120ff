package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/remote"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

func TestShare(t *testing.T) {
	cases := []struct {
		name        string
		mine, total float64
		nodes       int
		want        float64
	}{
		{"alone", 5, 5, 1, 1},
		{"no demand: even", 0, 0, 4, 0.25},
		{"equal demand", 10, 40, 4, 0.25},
		{"the busy one of four", 100, 100, 4, 0.932},
		{"an idle one of four", 0, 100, 4, 0.0227},
		{"90% of two", 90, 100, 2, 0.864},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, Share(tc.mine, tc.total, tc.nodes).Fraction(), 0.001)
		})
	}
	// Shares computed from one view sum to one.
	demands := []float64{50, 30, 15, 5, 0}
	sum := 0.0
	for _, d := range demands {
		sum += Share(d, 100, len(demands)).Fraction()
	}
	assert.InDelta(t, 1, sum, 0.001)
}

func TestCountersAreRunningTotals(t *testing.T) {
	cs := newCounters(2)
	lim := limit.PerSecond(10)
	win := lim.WithAlgorithm(limit.FixedWindow)
	now := time.Unix(1_800_000_000, 0)
	assert.Zero(t, cs.add(local.Spend{Key: "a", Limit: lim, Spent: 1, Hits: 2}, now))
	assert.Zero(t, cs.add(local.Spend{Key: "a", Limit: lim, Spent: 3, Hits: 3}, now))
	assert.Zero(t, cs.add(local.Spend{Key: "w", Limit: win, Spent: 1, Window: 7}, now))
	assert.Equal(t, int64(5), cs.add(local.Spend{Key: "w", Limit: win, Spent: 5, Window: 8}, now), "a third counter does not fit: its weight is lost, and said so")

	due := cs.due(nil)
	require.Len(t, due, 2)
	assert.Less(t, due[0].epoch, due[1].epoch, "in the order of their epochs")
	a := due[0]
	assert.Equal(t, spendKey{key: "a", lim: lim}, a.spendKey)
	assert.Equal(t, int64(4), a.total)
	assert.Equal(t, int64(5), a.hits)
	assert.GreaterOrEqual(t, a.epoch, now.UnixMicro(), "epochs start from the clock, so they grow across restarts")

	cs.ack(a, 4, 5, now)
	assert.Len(t, cs.due(nil), 1, "acknowledged: nothing due")
	cs.add(local.Spend{Key: "a", Limit: lim, Spent: 2, Hits: 2}, now)
	assert.Equal(t, int64(6), cs.due(nil)[0].total, "the total keeps running: reports are idempotent")

	// Forgetting: an acknowledged idle key, and windows no algorithm weighs.
	cs.ack(a, 6, 2, now)
	cs.forget(now.Add(time.Second), 2*time.Second, 8*int64(time.Second)) // Redis in window 8: 7 is still the previous
	assert.Len(t, cs.m, 2, "not idle long enough")
	cs.forget(now.Add(3*time.Second), 2*time.Second, 9*int64(time.Second)+1)
	assert.Empty(t, cs.m, "a idle and acknowledged; window 7 older than the previous one at window 9")
	assert.Zero(t, cs.unacked())
}

// fixture is a reconciler on a real Redis, driven round by round.
type fixture struct {
	srv    *redistest.Server
	engine *local.Engine
	store  *remote.Store
	b      *breaker.Breaker
	r      *Reconciler
	logs   *bytes.Buffer
}

func newFixture(t *testing.T, cfg Config) *fixture {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond })
	e, err := local.New(local.Config{TrackSpend: true})
	require.NoError(t, err)
	s, err := remote.New(c, remote.Options{Node: "me"})
	require.NoError(t, err)
	b := breaker.New(breaker.Settings{Timeout: time.Second, OpenFor: 50 * time.Millisecond})
	logs := &bytes.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r, err := New(cfg, Deps{Engine: e, Store: s, Breaker: b, Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(t, err)
	return &fixture{srv: srv, engine: e, store: s, b: b, r: r, logs: logs}
}

func (f *fixture) allow(t *testing.T, key string, lim limit.Limit, n int64) bool {
	res, err := f.engine.AllowN(time.Now().UnixNano(), key, lim, n)
	require.NoError(t, err)
	return res.Allowed
}

func TestRoundReportsAndSeeds(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour)
	require.True(t, f.allow(t, "k", lim, 30))
	require.NoError(t, f.r.Round(bg))
	st := f.r.Stats()
	assert.Equal(t, uint64(1), st.Rounds)
	assert.Equal(t, uint64(1), st.KeysSent)
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, 1, st.Nodes)

	// Another node spends 50 on the same key; after this node's next round
	// its memory holds the global state: 20 left.
	other, err := remote.New(f.store.Client(), remote.Options{Node: "other"})
	require.NoError(t, err)
	var r remote.Round
	require.NoError(t, other.Reconcile(bg, []remote.Report{{Key: "k", Limit: lim, Epoch: 1, Total: 50, Demand: 1}}, &r))
	require.True(t, f.allow(t, "k", lim, 1))
	require.NoError(t, f.r.Round(bg))
	res, err := f.engine.AllowN(time.Now().UnixNano(), "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(19), res.Remaining, "100 - 30 - 50 - 1")
	assert.Equal(t, 2, f.r.Stats().Nodes)
}

func TestFailedRoundKeepsSpend(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour)
	require.True(t, f.allow(t, "k", lim, 40))
	f.srv.Kill()
	assert.Error(t, f.r.Round(bg))
	assert.Equal(t, 1, f.r.Stats().Pending, "kept for the next round")
	require.True(t, f.allow(t, "k", lim, 2))
	f.srv.Restart()
	require.Eventually(t, func() bool { return f.r.Round(bg) == nil }, 5*time.Second, 60*time.Millisecond)
	assert.Equal(t, 0, f.r.Stats().Pending)
	v, err := f.srv.Do("HGET", "rl:tb:{k}", "l")
	require.NoError(t, err)
	assert.NotNil(t, v)
	d, err := f.store.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(58), d.Remaining, "the 42 spent across the outage reached the empty Redis")
}

func TestFullBufferCountsAndLogsTheLoss(t *testing.T) {
	f := newFixture(t, Config{MaxPending: 2})
	lim := limit.Per(100, time.Hour)
	f.srv.Kill()
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, f.allow(t, k, lim, 5))
	}
	assert.Error(t, f.r.Round(bg))
	assert.Equal(t, uint64(5), f.r.Stats().LostSpend)
	assert.Contains(t, f.logs.String(), "spend lost")
	assert.Contains(t, f.logs.String(), "weight=5")
}

func TestRefusedKeyIsDroppedNotRetriedForever(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour)
	_, err := f.srv.Do("SET", "rl:tb:{theirs}", "someone else's")
	require.NoError(t, err)
	require.True(t, f.allow(t, "theirs", lim, 3))
	require.True(t, f.allow(t, "ours", lim, 3))
	require.NoError(t, f.r.Round(bg))
	st := f.r.Stats()
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, uint64(3), st.LostSpend)
	assert.Contains(t, f.logs.String(), "redis refused the key")
}

func TestRunStopsWithItsContext(t *testing.T) {
	var rounds []RoundInfo
	f := newFixture(t, Config{Interval: 5 * time.Millisecond})
	f.r.cfg.OnRound = func(i RoundInfo) { rounds = append(rounds, i) }
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { f.r.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { return f.r.Stats().Rounds >= 3 }, 5*time.Second, time.Millisecond)
	cancel()
	<-done
	assert.NoError(t, rounds[0].Err)
	assert.Equal(t, 1, rounds[0].Nodes)
}

func TestJitterStaysInBounds(t *testing.T) {
	f := newFixture(t, Config{Interval: 100 * time.Millisecond, Jitter: 0.2})
	for range 1000 {
		d := f.r.next()
		assert.GreaterOrEqual(t, d, 80*time.Millisecond)
		assert.LessOrEqual(t, d, 120*time.Millisecond)
	}
}

func TestNewChecksItsInputs(t *testing.T) {
	_, err := New(Config{}, Deps{})
	assert.Error(t, err)
	f := newFixture(t, Config{})
	_, err = New(Config{Interval: -1}, f.r.deps)
	assert.Error(t, err)
	assert.Equal(t, DefaultInterval, f.r.Interval())
}

// batchHook records, for every pipeline a client sends, how many keys its
// script calls carry, and can act once a given pipeline has returned.
type batchHook struct {
	mu      sync.Mutex
	keys    []int // per pipeline
	after   int   // run then after this many pipelines (0: never)
	then    func()
	started bool
}

func (h *batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		keys := 0
		for _, c := range cmds {
			if args := c.Args(); len(args) > 2 && (c.Name() == "evalsha" || c.Name() == "eval") {
				n, _ := strconv.Atoi(fmt.Sprint(args[2]))
				keys += n
			}
		}
		err := next(ctx, cmds)
		h.mu.Lock()
		h.keys = append(h.keys, keys)
		fire := h.after > 0 && len(h.keys) == h.after && !h.started
		if fire {
			h.started = true
		}
		h.mu.Unlock()
		if fire {
			h.then()
		}
		return err
	}
}

func (h *batchHook) pipelines() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keys)
}

// warmUp runs a round with one key, so Redis has the scripts and the
// calls counted after it are the batches alone.
func warmUp(t *testing.T, f *fixture) {
	t.Helper()
	require.True(t, f.allow(t, "warm-up", limit.PerSecond(1), 1))
	require.NoError(t, f.r.Round(bg))
}

func spendOnKeys(t *testing.T, f *fixture, n int, lim limit.Limit) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
		require.True(t, f.allow(t, keys[i], lim, 1))
	}
	return keys
}

// A round of many keys goes out in batches of at most BatchSize keys, each
// its own call: no single call grows with the round, so a node with a
// large backlog (after an outage) never has a call that must time out.
func TestRoundSendsInBatches(t *testing.T) {
	f := newFixture(t, Config{BatchSize: 1000})
	warmUp(t, f)
	hook := &batchHook{}
	f.store.Client().AddHook(hook)
	spendOnKeys(t, f, 4500, limit.Per(100, time.Hour))

	require.NoError(t, f.r.Round(bg))
	// Each call also carries the heartbeat's key.
	assert.Equal(t, []int{1001, 1001, 1001, 1001, 501}, hook.pipelines())
	st := f.r.Stats()
	assert.Equal(t, uint64(1+4500), st.KeysSent)
	assert.Zero(t, st.Pending)

	// A round with nothing to report still beats the heartbeat: one call.
	require.NoError(t, f.r.Round(bg))
	assert.Len(t, hook.pipelines(), 6)
}

// When a batch fails, the round stops there: the batches before it are
// acknowledged, the rest (and the failed one) wait for the next round, and
// nothing is counted twice even though the failed batch reached Redis late.
func TestFailedBatchStopsTheRoundAndLosesNothing(t *testing.T) {
	f := newFixture(t, Config{BatchSize: 1000, BatchTimeout: 200 * time.Millisecond})
	warmUp(t, f)
	hook := &batchHook{after: 1, then: f.srv.Pause}
	f.store.Client().AddHook(hook)
	lim := limit.Per(100, time.Hour)
	keys := spendOnKeys(t, f, 3000, lim)

	require.Error(t, f.r.Round(bg), "the second batch meets a stopped Redis")
	st := f.r.Stats()
	assert.Equal(t, uint64(1+1000), st.KeysSent, "the first batch was applied")
	assert.Equal(t, 2000, st.Pending, "the rest is kept")

	f.srv.Resume() // the abandoned second batch now runs in Redis, too
	require.Eventually(t, func() bool { return f.r.Round(bg) == nil }, 5*time.Second, 60*time.Millisecond)
	assert.Zero(t, f.r.Stats().Pending)
	for _, k := range keys {
		d, err := f.store.AllowN(bg, k, lim, 0)
		require.NoError(t, err)
		require.Equal(t, int64(99), d.Remaining, "%s: spent once, counted once", k)
	}
}
