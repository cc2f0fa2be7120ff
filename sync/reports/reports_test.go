package reports

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
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
	"github.com/hybridlimit/hybridlimit/sync/round"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs() // go-redis logs every dial the outages fail
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

func TestCountersAreRunningTotals(t *testing.T) {
	cs := newCounters(2, 0)
	lim := limit.PerSecond(10)
	win := lim.WithAlgorithm(limit.FixedWindow)
	now := time.Unix(1_800_000_000, 0)
	assert.Zero(t, cs.add(local.Spend{Key: "a", Limit: lim, Spent: 1, Charge: 1, Hits: 2}, now))
	assert.Zero(t, cs.add(local.Spend{Key: "a", Limit: lim, Spent: 3, Charge: 1, Hits: 3, Due: true}, now))
	assert.Zero(t, cs.add(local.Spend{Key: "w", Limit: win, Spent: 1, Charge: 1, Window: 7}, now))
	assert.Equal(t, int64(5), cs.add(local.Spend{Key: "w", Limit: win, Spent: 5, Window: 8}, now), "a third counter does not fit: its weight is lost, and said so")

	a := cs.m[spendKey{key: "a", lim: lim}]
	require.NotNil(t, a)
	assert.Equal(t, int64(4), a.total)
	assert.Equal(t, int64(2), a.refilled, "degraded spend that had refilled: 2 of 4 not charged")
	assert.Equal(t, int64(5), a.hits)
	assert.True(t, a.due)
	assert.GreaterOrEqual(t, a.epoch, now.UnixMicro(), "epochs start from the clock, so they grow across restarts")
	w := cs.m[spendKey{key: "w", lim: win, window: 7}]
	assert.Greater(t, w.epoch, a.epoch, "epochs grow per counter")
	assert.Equal(t, 2, cs.unacked())
}

// fixture is a reconciler on a real Redis, driven round by round.
type fixture struct {
	srv    *redistest.Server
	engine *local.Engine
	store  *remote.Store
	b      *breaker.Breaker
	r      *Reporter
	logs   *bytes.Buffer
}

func newFixture(t testing.TB, cfg Config, opts ...remote.Options) *fixture {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond })
	e, err := local.New(local.Config{TrackSpend: true, KeepOrphans: true, SpendDue: true})
	require.NoError(t, err)
	o := remote.Options{Node: "me"}
	if len(opts) > 0 {
		o = opts[0]
		o.Node = "me"
	}
	s, err := remote.New(c, o)
	require.NoError(t, err)
	b := breaker.New(breaker.Settings{Timeout: time.Second, OpenFor: 50 * time.Millisecond})
	logs := &bytes.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r, err := New(cfg, Deps{Engine: e, Store: s, Breaker: b, Clock: clock.Real{}, Offset: clock.NewOffset(time.Now())})
	require.NoError(t, err)
	return &fixture{srv: srv, engine: e, store: s, b: b, r: r, logs: logs}
}

func (f *fixture) allow(t testing.TB, key string, lim limit.Limit, n int64) bool {
	res, err := f.engine.AllowN(time.Now().UnixNano(), key, lim, n)
	require.NoError(t, err)
	return res.Allowed
}

func TestRoundReportsAndSeeds(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour) // alone: the whole limit, due at 50
	require.True(t, f.allow(t, "k", lim, 60))
	require.NoError(t, f.r.Round(bg))
	st := f.r.Stats()
	assert.Equal(t, uint64(1), st.Rounds)
	assert.Equal(t, uint64(1), st.KeysSent)
	assert.Equal(t, 0, st.Pending)
	assert.Equal(t, 1, st.Nodes)
	assert.Equal(t, 1, st.Leases, "Redis granted this node the key's whole limit")

	// Another node spends 30 on the same key. This node, unaware, spends 20
	// more and is then denied: the denial reports, and the answer holds the
	// fleet's spend: 110 of 100, in debt.
	other, err := remote.New(f.store.Client(), remote.Options{Node: "other"})
	require.NoError(t, err)
	var r remote.Round
	require.NoError(t, other.Reconcile(bg, []remote.Report{{Key: "k", Limit: lim, Epoch: 1, Total: 30, Demand: 1}}, &r))
	require.True(t, f.allow(t, "k", lim, 20))
	require.False(t, f.allow(t, "k", lim, 30))
	require.NoError(t, f.r.Round(bg))
	res, err := f.engine.AllowN(time.Now().UnixNano(), "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Remaining, "in debt")
	spent, err := f.store.Ledger(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(110), spent)
	assert.Equal(t, 2, f.r.Stats().Nodes)
}

// TestColdKeysCostRedisNothing: keys spent on far below this node's share
// are decided in memory and not reported, round after round; a final flush
// reports them.
func TestColdKeysCostRedisNothing(t *testing.T) {
	f := newFixture(t, Config{})
	warmUp(t, f)
	hook := &batchHook{}
	f.store.Client().AddHook(hook)
	lim := limit.Per(100, time.Hour)
	for i := range 1000 {
		require.True(t, f.allow(t, fmt.Sprintf("cold%d", i), lim, 1+int64(i%10)))
	}
	for range 5 {
		require.NoError(t, f.r.Round(bg))
	}
	assert.Equal(t, []int{1, 1, 1, 1, 1}, hook.pipelines(), "the heartbeat alone (the fleet's key)")
	require.NoError(t, f.r.Flush(bg))
	total := int64(0)
	for i := range 1000 {
		spent, err := f.store.Ledger(bg, fmt.Sprintf("cold%d", i), lim)
		require.NoError(t, err)
		total += spent
	}
	assert.Equal(t, int64(100*(1+10)/2*10), total, "every weight reached the ledger at the flush")
}

// TestPressureReportsBackOff: a key denied round after round on one node,
// with nothing to change, is reported ever more rarely.
func TestPressureReportsBackOff(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(10, time.Hour)
	reports := 0
	for range 64 {
		f.allow(t, "hot", lim, 1)
		f.allow(t, "hot", lim, 10) // denied every round
		before := f.r.Stats().KeysSent
		require.NoError(t, f.r.Round(bg))
		reports += int(f.r.Stats().KeysSent - before)
	}
	assert.LessOrEqual(t, reports, 10, "1, 2, 4, 8, 16, 32 rounds apart, not 64 reports")
	assert.GreaterOrEqual(t, reports, 3)
}

func TestFailedRoundKeepsSpend(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour)
	require.True(t, f.allow(t, "k", lim, 60))
	f.srv.Kill()
	assert.Error(t, f.r.Round(bg))
	assert.Equal(t, 1, f.r.Stats().Pending, "kept for the next round")
	require.True(t, f.allow(t, "k", lim, 2))
	f.srv.Restart()
	require.Eventually(t, func() bool { return f.r.Round(bg) == nil }, 5*time.Second, 60*time.Millisecond)
	assert.Equal(t, 0, f.r.Stats().Pending)
	require.NoError(t, f.r.Flush(bg))
	d, err := f.store.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(38), d.Remaining, "the 62 spent across the outage reached the empty Redis")
}

func TestFullBufferCountsAndLogsTheLoss(t *testing.T) {
	f := newFixture(t, Config{MaxPending: 2})
	lim := limit.Per(100, time.Hour)
	f.srv.Kill()
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, f.allow(t, k, lim, 55))
	}
	assert.Error(t, f.r.Round(bg))
	assert.Equal(t, uint64(55), f.r.Stats().LostSpend)
	assert.Contains(t, f.logs.String(), "spend lost")
	assert.Contains(t, f.logs.String(), "weight=55")
}

// TestRefusedKeyIsDecidedUnderTheFallback: a key of another type under our
// prefix is named once in the log, counted, marked so that decisions on it
// use the fallback, and its spend is kept until Redis accepts the key again.
func TestRefusedKeyIsDecidedUnderTheFallback(t *testing.T) {
	f := newFixture(t, Config{})
	lim := limit.Per(100, time.Hour)
	theirs := "rl:tb:{theirs}:100/1h0m0s/100"
	_, err := f.srv.Do("SET", theirs, "someone else's")
	require.NoError(t, err)
	require.True(t, f.allow(t, "theirs", lim, 60))
	require.True(t, f.allow(t, "ours", lim, 60))
	require.NoError(t, f.r.Round(bg))
	st := f.r.Stats()
	assert.Equal(t, uint64(1), st.KeyFaults)
	assert.Zero(t, st.LostSpend, "kept, not dropped")
	assert.Equal(t, 1, strings.Count(f.logs.String(), "redis refuses this key"))
	assert.Contains(t, f.logs.String(), "key=theirs")
	_, err = f.engine.AllowN(time.Now().UnixNano(), "theirs", lim, 1)
	assert.ErrorIs(t, err, local.ErrFaulted)
	res, err := f.engine.AllowN(time.Now().UnixNano(), "ours", lim, 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)

	// Someone removes their key: the next try accepts ours, with its spend.
	_, err = f.srv.Do("DEL", theirs)
	require.NoError(t, err)
	for range faultRetryRounds + 1 {
		require.NoError(t, f.r.Round(bg))
	}
	assert.Equal(t, 1, strings.Count(f.logs.String(), "redis refuses this key"), "named once")
	spent, err := f.store.Ledger(bg, "theirs", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(60), spent)
	_, err = f.engine.AllowN(time.Now().UnixNano(), "theirs", lim, 1)
	assert.NoError(t, err, "decided in memory again")
}

// TestLeaseLapsesToTheDefaultShare: a share Redis granted is used only while
// its lease holds; an idle key goes back to one over the fleet.
func TestLeaseLapsesToTheDefaultShare(t *testing.T) {
	f := newFixture(t, Config{FleetSize: 4, Interval: 10 * time.Millisecond},
		remote.Options{Lease: 400 * time.Millisecond, ShortLease: 100 * time.Millisecond})
	lim := limit.Per(100, time.Hour)
	assert.Equal(t, local.ShareAmong(4), f.engine.DefaultShare())
	require.True(t, f.allow(t, "k", lim, 20))
	require.False(t, f.allow(t, "k", lim, 10), "denied: pressure")
	require.NoError(t, f.r.Round(bg))
	require.Equal(t, 1, f.r.Stats().Leases)
	res, err := f.engine.AllowN(time.Now().UnixNano(), "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(80), res.Remaining, "alone on the key: granted all of what is left")

	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { f.r.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { return f.r.Stats().Leases == 0 }, 5*time.Second, 5*time.Millisecond,
		"the short lease of a share above an even split lapses unused")
	cancel()
	<-done
	res, err = f.engine.AllowN(time.Now().UnixNano(), "k", lim, 0)
	require.NoError(t, err)
	assert.LessOrEqual(t, res.Remaining, int64(20), "back to a quarter of the estimate")
}

func TestRunStopsWithItsContext(t *testing.T) {
	var rounds []round.Info
	f := newFixture(t, Config{Interval: 5 * time.Millisecond, OnRound: func(i round.Info) { rounds = append(rounds, i) }})
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
		d := f.r.Next()
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
	assert.Equal(t, round.DefaultInterval, f.r.Interval())
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
func warmUp(t testing.TB, f *fixture) {
	t.Helper()
	require.True(t, f.allow(t, "warm-up", limit.PerSecond(1), 1))
	require.NoError(t, f.r.Round(bg))
}

// due is a limit one request puts due for a report: half of a burst of 2.
var due = limit.Per(2, time.Hour)

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
	f := newFixture(t, Config{BatchSize: 1000, MaxReports: 10000})
	warmUp(t, f)
	hook := &batchHook{}
	f.store.Client().AddHook(hook)
	spendOnKeys(t, f, 4500, due)

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
	f := newFixture(t, Config{BatchSize: 1000, BatchTimeout: 500 * time.Millisecond})
	warmUp(t, f)
	hook := &batchHook{after: 1, then: f.srv.Pause}
	f.store.Client().AddHook(hook)
	lim := due
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
		require.Equal(t, int64(1), d.Remaining, "%s: spent once, counted once", k)
	}
}

// A key under pressure is reported in the first round, however many keys
// are due with it: a flood of keys cannot delay it.
func TestPressureGoesFirst(t *testing.T) {
	f := newFixture(t, Config{BatchSize: 1000, MaxReports: 1000})
	warmUp(t, f)
	spendOnKeys(t, f, 5000, due)
	hot := limit.Per(10, time.Hour)
	require.True(t, f.allow(t, "hot", hot, 10))
	require.False(t, f.allow(t, "hot", hot, 1))
	require.NoError(t, f.r.Round(bg))
	spent, err := f.store.Ledger(bg, "hot", hot)
	require.NoError(t, err)
	assert.Equal(t, int64(10), spent, "reported in the first round")
	st := f.r.Stats()
	assert.Equal(t, uint64(1+1000), st.KeysSent, "at most MaxReports a round")
	assert.Equal(t, uint64(4001), st.Deferred)
	for range 5 {
		require.NoError(t, f.r.Round(bg))
	}
	assert.Zero(t, f.r.Stats().Pending, "the rest follow, a bounded batch a round")
}
