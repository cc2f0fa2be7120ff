package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

var bg = context.Background()

func TestRedisKey(t *testing.T) {
	long := strings.Repeat("x", MaxRawKey+1)
	cases := []struct {
		name, key string
		hashed    bool
	}{
		{"plain", "user:42", false},
		{"at the bound", strings.Repeat("x", MaxRawKey), false},
		{"too long", long, true},
		{"space", "user 42", true},
		{"newline", "user\n42", true},
		{"utf-8", "пользователь:42", true},
		{"open brace", "a{b", true},
		{"close brace", "a}b", true},
		{"starts with #", "#abc", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := redisKey("rl:", limit.PerSecond(100), tc.key)
			require.True(t, strings.HasPrefix(k, "rl:tb:{"))
			require.True(t, strings.HasSuffix(k, "}:100/1s/100"))
			inner := k[len("rl:tb:{") : len(k)-len("}:100/1s/100")]
			if tc.hashed {
				assert.Len(t, inner, 33, "# and 32 hex digits")
				assert.Equal(t, byte('#'), inner[0])
			} else {
				assert.Equal(t, tc.key, inner)
			}
			assert.Equal(t, 1, strings.Count(k, "{"), "exactly one hash tag")
		})
	}
	// Long keys that share a long prefix are not truncated into one.
	lim := limit.PerSecond(10)
	assert.NotEqual(t, redisKey("rl:", lim, long+"a"), redisKey("rl:", lim, long+"b"))
	assert.NotEqual(t, redisKey("rl:", lim, "k"), redisKey("rl:", lim.WithAlgorithm(limit.FixedWindow), "k"))
	// One key under limits that differ in rate, period or burst: one state each.
	assert.NotEqual(t, redisKey("rl:", lim, "k"), redisKey("rl:", limit.PerSecond(11), "k"))
	assert.NotEqual(t, redisKey("rl:", lim, "k"), redisKey("rl:", limit.PerMinute(10), "k"))
	assert.NotEqual(t, redisKey("rl:", lim, "k"), redisKey("rl:", lim.WithBurst(5), "k"))
	assert.Equal(t, "rl:fw:{k}:10/1m0s", redisKey("rl:", limit.PerMinute(10).WithAlgorithm(limit.FixedWindow), "k"))
}

func TestNewRejectsBadOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cases := []Options{
		{Prefix: "rl:{x}"},
		{Prefix: strings.Repeat("p", 65)},
		{Node: "a node"},
		{Node: strings.Repeat("n", 129)},
		{ActiveWindow: time.Microsecond},
	}
	for _, o := range cases {
		_, err := New(c, o)
		assert.Error(t, err, "%+v", o)
	}
	_, err := New(nil, Options{})
	assert.Error(t, err)
	s, err := New(c, Options{})
	require.NoError(t, err)
	assert.Equal(t, DefaultPrefix, s.Prefix())
	assert.NotEmpty(t, s.Node())
}

func TestPrefixesDoNotShareState(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	a, err := New(c, Options{Prefix: "a:"})
	require.NoError(t, err)
	b, err := New(c, Options{Prefix: "b:"})
	require.NoError(t, err)
	lim := limit.Per(1, time.Hour)
	da, err := a.AllowN(bg, "k", lim, 1)
	require.NoError(t, err)
	db, err := b.AllowN(bg, "k", lim, 1)
	require.NoError(t, err)
	assert.True(t, da.Allowed)
	assert.True(t, db.Allowed, "the other prefix has its own state")
}

// TestNoScriptRecovery: a Redis that lost its scripts (SCRIPT FLUSH, or a
// restart that came back empty) costs the caller nothing: no error, on the
// decision path and on the pipelined reconcile path.
func TestNoScriptRecovery(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = 3 })
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))
	lim := limit.PerSecond(100)

	for _, lose := range []struct {
		name string
		do   func()
	}{
		{"SCRIPT FLUSH", func() { _, err := srv.Do("SCRIPT", "FLUSH"); require.NoError(t, err) }},
		{"restart", srv.Restart},
	} {
		t.Run(lose.name, func(t *testing.T) {
			lose.do()
			d, err := s.AllowN(bg, "k", lim, 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed)

			lose.do()
			var r Round
			require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1, Demand: 1}}, &r))
			require.Len(t, r.Answers, 1)
			assert.NoError(t, r.Answers[0].Err)
			assert.Equal(t, 1, r.Nodes)
		})
	}
}

func TestFaultsAreTypedErrors(t *testing.T) {
	lim := limit.PerSecond(10)

	t.Run("wrong type", func(t *testing.T) {
		// Someone else's data under our names: a string or a list where we
		// keep a hash. Each is reported and left as it is, never overwritten.
		srv := redistest.Start(t)
		s, _ := New(srv.Client(t), Options{})
		win := limit.PerSecond(10).WithAlgorithm(limit.FixedWindow)
		for _, theirs := range []struct {
			key   string
			lim   limit.Limit
			setup []any
		}{
			{"list", lim, []any{"RPUSH", redisKey(s.prefix, lim, "list"), "v"}},
			{"string", lim, []any{"SET", redisKey(s.prefix, lim, "string"), "not ours"}},
			{"window", win, []any{"SET", redisKey(s.prefix, win, "window"), "1:2"}},
		} {
			_, err := srv.Do(theirs.setup...)
			require.NoError(t, err)
			_, err = s.AllowN(bg, theirs.key, theirs.lim, 1)
			assert.ErrorIs(t, err, ErrWrongType, theirs.key)
			assert.True(t, IsKeyFault(err))
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, theirs.key, e.Key)
			var r Round
			_ = s.Reconcile(bg, []Report{{Key: theirs.key, Limit: theirs.lim, Epoch: 1, Total: 1}, {Key: "ours", Limit: lim, Epoch: 1, Total: 1}}, &r)
			assert.ErrorIs(t, r.Answers[0].Err, ErrWrongType, theirs.key)
			assert.NoError(t, r.Answers[1].Err, "one key's fault does not fail the others")
		}
		v, err := srv.Do("GET", redisKey(s.prefix, lim, "string"))
		require.NoError(t, err)
		assert.Equal(t, "not ours", v, "left as it was")
		n, err := srv.Do("LLEN", redisKey(s.prefix, lim, "list"))
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "left as it was")
	})

	t.Run("out of memory", func(t *testing.T) {
		// One byte: an empty server is already over it, so every write is refused.
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "1", "--maxmemory-policy", "noeviction"))
		s, _ := New(srv.Client(t), Options{})
		_, err := s.AllowN(bg, "k", lim, 1)
		assert.ErrorIs(t, err, ErrOOM)
		assert.False(t, IsKeyFault(err))
	})

	t.Run("connection refused", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = time.Second })
		s, _ := New(c, Options{})
		srv.Kill()
		_, err := s.AllowN(bg, "k", lim, 1)
		assert.ErrorIs(t, err, ErrUnavailable)
		var r Round
		assert.ErrorIs(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1}}, &r), ErrUnavailable)
	})

	t.Run("timeout", func(t *testing.T) {
		srv := redistest.Start(t)
		// The store honours the caller's deadline as far as the client does:
		// go-redis needs ContextTimeoutEnabled for it to reach the socket.
		c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ContextTimeoutEnabled = true })
		s, _ := New(c, Options{})
		require.NoError(t, s.Ping(bg))
		srv.Pause()
		defer srv.Resume()
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.AllowN(ctx, "k", lim, 1)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Less(t, time.Since(start), 2*time.Second, "the deadline is honoured")
	})

	t.Run("canceled", func(t *testing.T) {
		srv := redistest.Start(t)
		s, _ := New(srv.Client(t), Options{})
		ctx, cancel := context.WithCancel(bg)
		cancel()
		_, err := s.AllowN(ctx, "k", lim, 1)
		assert.ErrorIs(t, err, ErrCanceled)
	})

	t.Run("garbage", func(t *testing.T) {
		// Something that speaks RESP but is not Redis: it answers +OK to
		// everything.
		addr := garbageServer(t)
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		s, _ := New(c, Options{})
		_, err := s.AllowN(bg, "k", lim, 1)
		assert.ErrorIs(t, err, ErrBadReply)
		var r Round
		assert.ErrorIs(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1}}, &r), ErrBadReply)
	})

	t.Run("caller errors are not redis errors", func(t *testing.T) {
		srv := redistest.Start(t)
		s, _ := New(srv.Client(t), Options{})
		_, err := s.AllowN(bg, "", lim, 1)
		assert.ErrorIs(t, err, limit.ErrInvalidKey)
		_, err = s.AllowN(bg, "k", limit.PerSecond(-1), 1)
		assert.ErrorIs(t, err, limit.ErrInvalidLimit)
		_, err = s.ReserveN(bg, "k", lim.WithAlgorithm(limit.FixedWindow), 1, time.Second)
		assert.ErrorIs(t, err, ErrNotBucket)
		_, _, err = s.CancelN(bg, "k", lim.WithAlgorithm(limit.SlidingWindowLog), 1, 0)
		assert.ErrorIs(t, err, ErrNotBucket)
	})
}

// garbageServer listens on a loopback port and answers every command with
// +OK, as a misconfigured proxy might.
func garbageServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "*") { // a new command: answer it
						if _, err := conn.Write([]byte("+OK\r\n")); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestReconcileCarriesDebt(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{})
	lim := limit.Per(10, time.Hour) // nothing refills during the test
	var r Round
	// The fleet admitted 15 of a burst of 10: 5 in debt.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 15, Demand: 1}}, &r))
	a := r.Answers[0]
	require.NoError(t, a.Err)
	ahead := a.State.TAT - a.Now
	assert.InDelta(t, float64(15*lim.Interval()), float64(ahead), float64(time.Second))
	d, err := s.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "in debt: nothing passes")
	assert.Equal(t, int64(0), d.Remaining)

	// Debt is never forgiven: what the fleet over-admitted is paid back in
	// full, so no shape of traffic turns it into lasting excess.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1015}}, &r))
	assert.InDelta(t, float64(1015*lim.Interval()), float64(r.Answers[0].State.TAT-r.Answers[0].Now), float64(time.Second))
	spent, err := s.Ledger(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(1015), spent, "the ledger holds every weight applied")
}

// TestReconcileChargesRefilledSpendOnce: spend made while degraded that had
// refilled by the report is in the ledger but not charged to the limit.
func TestReconcileChargesRefilledSpendOnce(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{})
	lim := limit.Per(100, time.Hour)
	var r Round
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 50, Refilled: 40}}, &r))
	d, err := s.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(90), d.Remaining, "charged 10 of 50")
	// Sent again, with more spend on top: only the new part counts.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 55, Refilled: 40, Acked: 50, AckedRefilled: 40}}, &r))
	d, _ = s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(85), d.Remaining)
	spent, err := s.Ledger(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(55), spent)
}

// TestReconcileIsIdempotent: a report sent twice, or an old one late, is
// applied once; a new epoch starts afresh; the previous epoch is still known.
func TestReconcileIsIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{Node: "n"})
	lim := limit.Per(100, time.Hour)
	remaining := func() int64 {
		d, err := s.AllowN(bg, "k", lim, 0)
		require.NoError(t, err)
		return d.Remaining
	}
	send := func(epoch, total int64) {
		var r Round
		require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: epoch, Total: total}}, &r))
		require.NoError(t, r.Answers[0].Err)
	}
	steps := []struct {
		epoch, total int64
		remaining    int64
		why          string
	}{
		{10, 5, 95, "a first report applies its total"},
		{10, 5, 95, "the same report again: nothing"},
		{10, 8, 92, "a larger total in the same epoch: the difference"},
		{10, 6, 92, "a smaller total (an old report, late): nothing"},
		{20, 4, 88, "a new epoch: its whole total"},
		{10, 9, 87, "the previous epoch is still known: its difference"},
		{10, 9, 87, "... once"},
		{5, 50, 87, "an epoch older than both kept: stale, ignored"},
		{30, 1, 86, "a third epoch pushes the first out"},
		{10, 12, 86, "which is then ignored"},
	}
	for _, st := range steps {
		send(st.epoch, st.total)
		assert.Equal(t, st.remaining, remaining(), st.why)
	}

	// A node Redis forgot (silent longer than the active window, or a
	// Redis that lost its data) is charged only what it was never told was
	// applied.
	srv.Flush()
	var r Round
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 30, Total: 9, Acked: 1}}, &r))
	assert.Equal(t, int64(92), remaining(), "9 spent, 1 of which Redis had acknowledged before it lost it")
	assert.True(t, r.Answers[0].Lost, "acknowledged spend was lost: the node is told")
}

// TestReconcileRestoresLostState: a key deleted under the fleet is restored
// to the reporting node's own estimate, and the node is told.
func TestReconcileRestoresLostState(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{Node: "n"})
	lim := limit.Per(100, time.Hour)
	var r Round
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 60}}, &r))
	assert.False(t, r.Answers[0].Lost)
	estimate := r.Answers[0].State // the node's view: 60 of 100 spent, plus 20 more of the fleet's
	estimate.TAT += 20 * int64(lim.Interval())
	_, err := srv.Do("DEL", redisKey(s.prefix, lim, "k"))
	require.NoError(t, err)
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 61, Acked: 60,
		Estimate: estimate, Now: r.Answers[0].Now}}, &r))
	require.True(t, r.Answers[0].Lost)
	d, err := s.AllowN(bg, "k", lim, 0)
	require.NoError(t, err)
	assert.InDelta(t, 100-80-1, d.Remaining, 1, "restored to the estimate, with the new spend on top")
}

func TestReconcileTracksNodesAndDemand(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	lim := limit.PerSecond(100)
	a, _ := New(c, Options{Node: "a", ActiveWindow: 400 * time.Millisecond})
	b, _ := New(c, Options{Node: "b", ActiveWindow: 400 * time.Millisecond})
	ra, rb := Round{Fleet: 2}, Round{Fleet: 2}
	require.NoError(t, a.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1, Demand: 90}}, &ra))
	require.NoError(t, b.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 1, Demand: 10}}, &rb))
	assert.Equal(t, 2, rb.Answers[0].Nodes)
	assert.Equal(t, 2, rb.Nodes, "the fleet has two nodes")
	assert.InDelta(t, 100, rb.Answers[0].Demand, 1e-9, "the key's total demand")

	// A fresh report is smoothed with the previous one: a's 30 counts as 60.
	require.NoError(t, a.Reconcile(bg, []Report{{Key: "k", Limit: lim, Demand: 30}}, &ra))
	assert.InDelta(t, 70, ra.Answers[0].Demand, 1e-9)

	// b goes quiet: after the active window only a is counted.
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, a.Reconcile(bg, []Report{{Key: "k", Limit: lim, Demand: 30}}, &ra))
	assert.Equal(t, 1, ra.Answers[0].Nodes)
	assert.Equal(t, 1, ra.Nodes)
	assert.InDelta(t, 30, ra.Answers[0].Demand, 1e-9, "a stale report is not smoothed in")
}

// TestGrantsNeverAddUpToMoreThanTheLimit: a node granted the whole limit while
// alone keeps it only until its lease lapses, and meanwhile the others get
// what is left, not their demand's worth on top.
func TestGrantsNeverAddUpToMoreThanTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	lim := limit.PerMinute(600)
	opts := func(node string) Options {
		return Options{Node: node, Lease: 2 * time.Second, ShortLease: 300 * time.Millisecond, ActiveWindow: 5 * time.Second}
	}
	nodes := make([]*Store, 4)
	for i := range nodes {
		nodes[i], _ = New(c, opts(fmt.Sprintf("n%d", i)))
	}
	report := func(i int, demand float64) Answer {
		r := Round{Fleet: 4}
		require.NoError(t, nodes[i].Reconcile(bg, []Report{{Key: "k", Limit: lim, Demand: demand}}, &r))
		require.NoError(t, r.Answers[0].Err)
		return r.Answers[0]
	}
	first := report(0, 50)
	assert.Equal(t, int64(GrantOne), first.Grant, "alone: the whole limit")
	assert.Less(t, first.LeaseEnd-first.Now, int64(time.Second), "above an even split: the short lease")

	// Each of the others arrives with all the demand: one after another,
	// each would have been given most of the limit, and every node at once
	// would admit several times it.
	sum := first.Grant
	for i := 1; i < 4; i++ {
		a := report(i, 1000)
		sum += a.Grant
	}
	assert.LessOrEqual(t, sum, int64(GrantOne), "grants add up to at most the limit")

	// Once the first node's short lease lapses, the others share it.
	time.Sleep(400 * time.Millisecond)
	a := report(1, 1000)
	assert.Greater(t, a.Grant, int64(GrantOne/4), "the lapsed lease is given to the node that wants it")
}

func TestReconcileWindows(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{})
	period := 10 * time.Second
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := limit.Per(100, period).WithAlgorithm(alg)
			// Leave the whole test inside one window.
			if left := period - time.Duration(time.Now().UnixNano()%int64(period)); left < 2*time.Second {
				time.Sleep(left + 10*time.Millisecond)
			}
			var r Round
			require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1}}, &r))
			w := r.Answers[0].State.Window
			// A counter per window, in the order of their epochs.
			require.NoError(t, s.Reconcile(bg, []Report{
				{Key: "k", Limit: lim, Epoch: 2, Total: 3, Window: w - 2},
				{Key: "k", Limit: lim, Epoch: 3, Total: 5, Window: w - 1},
				{Key: "k", Limit: lim, Epoch: 4, Total: 7, Window: w},
			}, &r))
			st := r.Answers[2].State
			require.Equal(t, w, st.Window, "still the same window")
			assert.Equal(t, int64(7), st.Count)
			if alg == limit.SlidingWindowCounter {
				assert.Equal(t, int64(5), st.Prev, "spend of the previous window still weighs")
			} else {
				assert.Equal(t, int64(0), st.Prev)
			}
		})
	}
	var r Round
	err := s.Reconcile(bg, []Report{{Key: "k", Limit: limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowLog), Epoch: 1, Total: 1}}, &r)
	assert.NoError(t, err, "a report that cannot be sent says nothing about Redis: the round did not fail")
	assert.ErrorIs(t, r.Answers[0].Err, ErrNotReconcilable, "the report's own answer says why")
}

// pipelineCounter counts the pipelines and single commands that run scripts
// (a new connection's handshake is not the store's doing).
type pipelineCounter struct{ pipelines, commands atomic.Int64 }

func runsScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "evalsha" || name == "eval"
}

func (c *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runsScript(cmd) {
			c.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && runsScript(cmds[0]) {
			c.pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
}

func reports(n int, lim limit.Limit) []Report {
	rs := make([]Report, n)
	for i := range rs {
		rs[i] = Report{Key: fmt.Sprintf("user:%d", i), Limit: lim, Epoch: 1, Total: 1, Demand: 1}
	}
	return rs
}

func TestReconcileIsOneRoundTripPerRedisNode(t *testing.T) {
	lim := limit.PerSecond(100)
	t.Run("single node", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		s, _ := New(c, Options{})
		require.NoError(t, s.Ping(bg))
		var count pipelineCounter
		c.AddHook(&count)
		var r Round
		require.NoError(t, s.Reconcile(bg, reports(1000, lim), &r))
		assert.Equal(t, int64(1), count.pipelines.Load())
		assert.Equal(t, int64(0), count.commands.Load())
		assert.Len(t, r.Answers, 1000)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		var count pipelineCounter
		c := cl.Client(t)
		s, _ := New(c, Options{})
		require.NoError(t, s.Ping(bg))
		var r Round
		require.NoError(t, s.Reconcile(bg, reports(10, lim), &r)) // learn the slots
		c.OnNewNode(func(n *redis.Client) { n.AddHook(&count) })
		require.NoError(t, c.ForEachMaster(bg, func(_ context.Context, n *redis.Client) error { n.AddHook(&count); return nil }))
		require.NoError(t, s.Reconcile(bg, reports(1000, lim), &r))
		for _, a := range r.Answers {
			require.NoError(t, a.Err)
		}
		assert.Equal(t, int64(3), count.pipelines.Load(), "one pipeline per master")
	})
}

func TestClusterMasterDownFailsOnlyItsKeys(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t, func(o *redis.ClusterOptions) {
		o.MaxRedirects = 1
		o.MaxRetries = -1
		o.DialTimeout = 500 * time.Millisecond
	})
	s, _ := New(c, Options{})
	lim := limit.PerSecond(100)
	rs := reports(60, lim)
	var r Round
	require.NoError(t, s.Reconcile(bg, rs, &r))
	victim := cl.MasterFor(redisKey(s.prefix, lim, rs[0].Key))
	victim.Kill()
	_ = s.Reconcile(bg, rs, &r)
	failed := 0
	for i, a := range r.Answers {
		onVictim := cl.MasterFor(redisKey(s.prefix, lim, rs[i].Key)) == victim
		if onVictim {
			assert.ErrorIs(t, a.Err, ErrUnavailable, rs[i].Key)
			failed++
		} else {
			assert.NoError(t, a.Err, rs[i].Key)
		}
	}
	assert.Positive(t, failed)
	assert.Less(t, failed, len(rs))
}

func TestACLUserPassesThrough(t *testing.T) {
	srv := redistest.Start(t)
	_, err := srv.Do("ACL", "SETUSER", "limiter", "on", ">s3cret", "~rl:*", "+@all")
	require.NoError(t, err)
	c := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "limiter", "s3cret" })
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))
	whoami, err := c.Do(bg, "ACL", "WHOAMI").Text()
	require.NoError(t, err)
	require.Equal(t, "limiter", whoami)
	d, err := s.AllowN(bg, "k", limit.PerSecond(1), 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	// The ACL confines the user to its prefix: another prefix is refused.
	other, _ := New(c, Options{Prefix: "elsewhere:"})
	_, err = other.AllowN(bg, "k", limit.PerSecond(1), 1)
	assert.ErrorIs(t, err, ErrRedis)
	assert.ErrorContains(t, err, "NOPERM")
}

// TestParityWithRedisRate plays the same burst and refill sequence against
// our token bucket script and go-redis/redis_rate on one Redis: the same
// number of admissions.
func TestParityWithRedisRate(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, _ := New(c, Options{})
	rr := redis_rate.NewLimiter(c)
	ours, theirs := 0, 0
	step := func(n int) {
		for range n {
			d, err := s.AllowN(bg, "parity", limit.PerSecond(10).WithBurst(5), 1)
			require.NoError(t, err)
			if d.Allowed {
				ours++
			}
			res, err := rr.Allow(bg, "parity", redis_rate.Limit{Rate: 10, Burst: 5, Period: time.Second})
			require.NoError(t, err)
			if res.Allowed > 0 {
				theirs++
			}
		}
	}
	step(8)                            // the burst of 5, then 3 denied
	time.Sleep(250 * time.Millisecond) // 2.5 tokens
	step(5)
	time.Sleep(time.Second) // full again
	step(8)
	assert.InDelta(t, theirs, ours, 1, "ours %d, redis_rate %d", ours, theirs)
	assert.GreaterOrEqual(t, ours, 5+2+5)
}

func TestErrorMessages(t *testing.T) {
	e := classify("allow", "user:1", errors.New("boom"))
	assert.Equal(t, "remote: redis error: allow user:1: boom", e.Error())
	assert.ErrorIs(t, e, ErrRedis)
	assert.Equal(t, e, classify("x", "y", e), "classifying twice changes nothing")
	assert.Nil(t, classify("x", "y", nil))
}

func TestIntsRejectsGarbage(t *testing.T) {
	_, err := ints([]any{int64(1)}, 2)
	assert.ErrorIs(t, err, ErrBadReply)
	_, err = ints([]any{int64(1), "x"}, 2)
	assert.ErrorIs(t, err, ErrBadReply)
	_, err = ints([]any{int64(1), []any{}}, 2)
	assert.ErrorIs(t, err, ErrBadReply)
	v, err := ints([]any{int64(1), "2.5"}, 2)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2}, v)
	_, err = parseAnswer(limit.TokenBucket, 0, []any{int64(1), int64(2), int64(0), int64(0), int64(3), "x", "1"})
	assert.ErrorIs(t, err, ErrBadReply)
	_, err = parseAnswer(limit.TokenBucket, 0, []any{int64(0), int64(0), int64(0), int64(0), int64(0), "WRONGTYPE Operation against a key holding the wrong kind of value", ""})
	assert.ErrorIs(t, classify("reconcile", "k", err), ErrWrongType, "an error a script caught is classified like any reply")
}

// TestHeavyRequestDecidedOnTheGlobalState: a request too heavy for any node's
// share is decided in Redis, once, after the report it comes with.
func TestHeavyRequestDecidedOnTheGlobalState(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{Node: "n"})
	for _, lim := range []limit.Limit{
		limit.Per(100, time.Hour),
		limit.Per(100, time.Hour).WithAlgorithm(limit.FixedWindow),
		limit.Per(100, time.Hour).WithAlgorithm(limit.SlidingWindowCounter),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			var r Round
			require.NoError(t, s.Reconcile(bg, []Report{{Key: "h", Limit: lim, Epoch: 1, Total: 30, Heavy: 70,
				Window: time.Now().UnixNano() / int64(lim.Period)}}, &r))
			assert.True(t, r.Answers[0].Admitted, "30 spent + 70 fit in 100")
			require.NoError(t, s.Reconcile(bg, []Report{{Key: "h", Limit: lim, Epoch: 1, Total: 100, Acked: 100, Heavy: 1,
				Window: time.Now().UnixNano() / int64(lim.Period)}}, &r))
			assert.False(t, r.Answers[0].Admitted, "full")
			spent, err := s.Ledger(bg, "h", lim)
			require.NoError(t, err)
			assert.Equal(t, int64(100), spent, "the heavy request counted once, in the node's total")
		})
	}
}

// TestTimedOutSyncDecisionCountedOnce: a sync decision that reached Redis
// but whose answer was lost, then decided again in memory and reported, is
// applied once; one that never reached Redis is applied by the report.
func TestTimedOutSyncDecisionCountedOnce(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{Node: "n"})
	lim := limit.Per(100, time.Hour)
	d, err := s.AllowNKnown(bg, "k", lim, 5, Known{Seq: 7}) // reached Redis; say its answer was lost
	require.NoError(t, err)
	require.True(t, d.Allowed)
	var r Round
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 5, Uncertain: []Uncertain{{Seq: 7, N: 5}}}}, &r))
	d, _ = s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(95), d.Remaining, "counted once")

	// Sequence 8 never reached Redis: the report's spend is applied.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 8, Acked: 5, Uncertain: []Uncertain{{Seq: 8, N: 3}}}}, &r))
	d, _ = s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(92), d.Remaining)
}

// Redis keeps every admitted sync decision above the node's low mark, not
// the last eight: a report names a timed-out decision however many the node
// made on the key since, and names them all; a named decision that never
// ran is fenced off, so its call changes nothing if it still arrives.
func TestTimedOutSyncDecisionsAmongManyCountedOnce(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := New(srv.Client(t), Options{Node: "n"})
	lim := limit.Per(1000, time.Hour)
	for seq := int64(10); seq < 110; seq++ { // 10 and 50 time out: the low mark stays at 9
		d, err := s.AllowNKnown(bg, "k", lim, 1, Known{Seq: seq, Low: 9})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	var r Round
	// The node counted 10, 50 and 200 (which it never sent) in memory.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 3,
		Uncertain: []Uncertain{{Seq: 10, N: 1}, {Seq: 50, N: 1}, {Seq: 200, N: 1}}, SeqLow: 9}}, &r))
	d, _ := s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(1000-101), d.Remaining, "10 and 50 counted once, 200 by the report")

	// The same report again (its answer lost): nothing more.
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "k", Limit: lim, Epoch: 1, Total: 3,
		Uncertain: []Uncertain{{Seq: 10, N: 1}, {Seq: 50, N: 1}, {Seq: 200, N: 1}}, SeqLow: 9}}, &r))
	d, _ = s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(1000-101), d.Remaining, "a report sent twice counts once")

	// 200's call arrives late: fenced, it changes nothing.
	d, err := s.AllowNKnown(bg, "k", lim, 1, Known{Seq: 200, Low: 109})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a decision already counted from memory is not applied")
	d, _ = s.AllowN(bg, "k", lim, 0)
	assert.Equal(t, int64(1000-101), d.Remaining)
}
