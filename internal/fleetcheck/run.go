package fleetcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Settings every node of every scenario shares.
const (
	redisTimeout   = 50 * time.Millisecond
	breakerOpenFor = 200 * time.Millisecond
	clientTimeout  = 200 * time.Millisecond
	// closeWithin bounds each node's Close (its last round).
	closeWithin = 5 * time.Second
	// recoverWithin bounds how long the fleet may take, after the traffic
	// and the fault are over, to leave degraded mode with its breakers
	// closed.
	recoverWithin = 10 * time.Second
	// sampleEvery is how often the ledger is read while the scenario runs.
	sampleEvery = 100 * time.Millisecond
	// keepLogs bounds the log lines a record keeps.
	keepLogs = 200
	// startAttempts bounds the tries at making a node while Redis is up.
	startAttempts = 3
)

// Decision is one decision the fleet made: what was asked, of which node,
// when, and what it answered.
type Decision struct {
	At      time.Duration // since the scenario began, when the call was made
	Node    int
	Key     int // index in Scenario.Keys
	Limit   int // index in the key's Limits
	N       int64
	Allowed bool
	Source  hybrid.Source
	Err     error
}

// NodeRecord is what one node did besides deciding.
type NodeRecord struct {
	Name     string
	StartErr error // New failed every attempt: the node decided nothing
	// StartAttempts is how many times New was called (more than one: a
	// first contact with Redis timed out).
	StartAttempts int
	CloseErr      error // Close could not report all it had spent
	LostSpend     uint64
	// EvictionsForgotten counts the keys evicted spent (MaxKeys) that came
	// back before their refill time with the node's memory of evictions
	// full: each may admit up to its share again (logged and counted by
	// the limiter, documented).
	EvictionsForgotten uint64
	// Rounds and RoundErrors count reconciliation rounds; MaxRound is the
	// slowest that succeeded, against which the bound's round-trip
	// allowance can be judged.
	Rounds, RoundErrors uint64
	MaxRound            time.Duration
	// MaxGap is the longest time between two successful rounds with no
	// failed one between them: how stale this node's view could get while
	// Redis answered (an interval, its jitter, a round trip, and whatever a
	// busy machine adds).
	MaxGap time.Duration
	// Late is how late, at worst, the driver sent this node a request:
	// the machine's own contribution to any burstiness.
	Late time.Duration
}

// Record is everything one run of a scenario produced.
type Record struct {
	Scenario  *Scenario
	Start     time.Time // when At 0 was, on the wall clock (Redis's too: same machine)
	Decisions []Decision
	// FaultAt and HealAt are when the fault began and ended, as done.
	FaultAt, HealAt time.Duration
	Nodes           []NodeRecord
	// Recovered is nil when every node left degraded mode, breaker
	// closed, within recoverWithin of the end of traffic.
	Recovered error
	Logs      []string // what the nodes logged, up to keepLogs lines
	ledger    *ledger  // nil in LocalOnly mode
	Took      time.Duration
}

// Run runs sc: a private redis-server (unless LocalOnly), a real
// hybrid.Limiter per node with its own client, each node driven by its own
// goroutine through its requests at their times, the fault caused for real
// from the calling goroutine (the test's: redistest reports through t), and
// then quiescence: the fleet recovers, every node closes, the ledger is read.
func Run(t testing.TB, sc *Scenario) *Record {
	t.Helper()
	began := time.Now()
	rec := &Record{Scenario: sc, Nodes: make([]NodeRecord, len(sc.Nodes))}
	logs := newLogSink()
	logger := slog.New(logs)

	var srv *redistest.Server
	var proxy *faultproxy.Proxy
	addr := ""
	if sc.Mode != hybrid.LocalOnly {
		srv = redistest.Start(t)
		addr = srv.Addr()
		if sc.Fault.Kind == Slow {
			proxy = faultproxy.Start(t, addr)
			addr = proxy.Addr()
		}
	}
	var clients []*redis.Client
	newClient := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: clientTimeout,
			ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, PoolTimeout: clientTimeout})
		clients = append(clients, c)
		return c
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()

	// The ledger is read on a client of its own, straight to Redis.
	records := ledgerRecords(sc)
	stopSampling := func() {}
	if srv != nil {
		rec.ledger = newLedger(newClient(srv.Addr()), sc.Mode)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(sampleEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					_ = rec.ledger.sample(ctx, records) // a fault fails some: the next sample sees what they missed
				}
			}
		}()
		stopSampling = sync.OnceFunc(func() { cancel(); <-done })
	}
	defer stopSampling()

	// Each node's requests, in time order.
	sched := make([][]Request, len(sc.Nodes))
	for _, r := range sc.Requests {
		sched[r.Node] = append(sched[r.Node], r)
	}
	clientsOf := make([]*redis.Client, len(sc.Nodes))
	for i := range sc.Nodes {
		if srv != nil {
			clientsOf[i] = newClient(addr)
		}
	}

	limiters := make([]*hybrid.Limiter, len(sc.Nodes)) // each written by its node's goroutine, read after they end
	open := make([]bool, len(sc.Nodes))
	decided := make([][]Decision, len(sc.Nodes))
	watches := make([]roundWatch, len(sc.Nodes))
	startNode := func(i int) {
		nr := &rec.Nodes[i]
		cfg := hybrid.Config{Prefix: ledgerPrefix, Mode: sc.Mode, SyncInterval: sc.Interval, Fallback: sc.Fallback, Ledger: true,
			RedisTimeout: redisTimeout, BreakerOpenFor: breakerOpenFor, MaxKeys: sc.MaxKeys, ActiveWindow: sc.ActiveWindow, Node: nr.Name, FleetSize: sc.FleetSize,
			Logger:  logger.With("node", i),
			OnRound: watches[i].observe}
		if clientsOf[i] != nil {
			cfg.Redis = clientsOf[i]
		}
		// Nodes start while Redis is up. A first contact that times out on a
		// busy machine (the client's reads give up after clientTimeout) is
		// tried again, and counted; only a node that cannot start at all is a
		// violation.
		var l *hybrid.Limiter
		var err error
		for nr.StartAttempts = 1; ; nr.StartAttempts++ {
			if l, err = hybrid.New(cfg); err == nil || !errors.Is(err, hybrid.ErrRedisUnavailable) || nr.StartAttempts == startAttempts {
				break
			}
			time.Sleep(clientTimeout)
		}
		if err != nil {
			nr.StartErr = err
			return
		}
		limiters[i], open[i] = l, true
	}
	closeNode := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), closeWithin)
		defer cancel()
		l := limiters[i]
		rec.Nodes[i].CloseErr = l.Close(ctx)
		st := l.Stats()
		rec.Nodes[i].LostSpend = st.Reconcile.LostSpend
		rec.Nodes[i].EvictionsForgotten = st.EvictionsForgotten
		rec.Nodes[i].Rounds, rec.Nodes[i].RoundErrors = st.Reconcile.Rounds, st.Reconcile.RoundErrors
		rec.Nodes[i].MaxRound, rec.Nodes[i].MaxGap = watches[i].result()
		open[i] = false
	}
	// The nodes up from the start are made before it, so that the first
	// requests are not late for want of them.
	for i, span := range sc.Nodes {
		rec.Nodes[i].Name = fmt.Sprintf("n%d", i)
		if span.Join == 0 {
			startNode(i)
		}
	}

	start := time.Now()
	rec.Start = start
	var wg sync.WaitGroup
	quiet := false // set once the nodes are closed the normal way
	defer func() {
		if !quiet { // a fault's t.Fatal ended the run early: leave nothing running
			wg.Wait()
			for i := range limiters {
				if open[i] {
					_ = limiters[i].Close(context.Background())
				}
			}
		}
	}()
	for i, span := range sc.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nr := &rec.Nodes[i]
			if span.Join > 0 {
				sleepUntil(start.Add(span.Join))
				startNode(i)
			}
			if !open[i] {
				return
			}
			l := limiters[i]
			ctx := context.Background()
			out := make([]Decision, 0, len(sched[i])*2)
			for _, r := range sched[i] {
				due := start.Add(r.At)
				sleepUntil(due)
				nr.Late = max(nr.Late, time.Since(due))
				k := &sc.Keys[r.Key]
				for li, lim := range k.Limits {
					at := time.Since(start)
					d, err := l.AllowN(ctx, k.Name, lim, r.N)
					out = append(out, Decision{At: at, Node: i, Key: r.Key, Limit: li, N: r.N, Allowed: d.Allowed && err == nil, Source: d.Source, Err: err})
				}
			}
			decided[i] = out
			if span.Leave < sc.Duration {
				sleepUntil(start.Add(span.Leave))
				closeNode(i)
			}
		}()
	}

	// The fault, on the calling goroutine.
	if f := sc.Fault; f.Kind != NoFault {
		sleepUntil(start.Add(f.At))
		rec.FaultAt = time.Since(start)
		switch f.Kind {
		case Kill:
			srv.Kill()
		case Pause:
			srv.Pause()
		case Slow:
			proxy.Latency(t, f.Latency)
		}
		sleepUntil(start.Add(f.Heal))
		switch f.Kind {
		case Kill:
			srv.Restart()
		case Pause:
			srv.Resume()
		case Slow:
			proxy.Clear()
		}
		rec.HealAt = time.Since(start)
	}
	wg.Wait()

	// Quiescence: the nodes still up recover, then close.
	if sc.Mode != hybrid.LocalOnly {
		rec.Recovered = awaitRecovery(limiters, open)
	}
	for i := range limiters {
		if open[i] {
			closeNode(i)
		}
	}
	quiet = true
	stopSampling()
	if rec.ledger != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeWithin)
		if err := rec.ledger.sample(ctx, records); err != nil {
			rec.Recovered = errors.Join(rec.Recovered, fmt.Errorf("fleetcheck: reading the ledger after quiescence: %w", err))
		}
		cancel()
	}
	for _, d := range decided {
		rec.Decisions = append(rec.Decisions, d...)
	}
	slices.SortStableFunc(rec.Decisions, func(a, b Decision) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	rec.Logs = logs.lines()
	rec.Took = time.Since(began)
	return rec
}

// roundWatch follows one node's rounds (hybrid.Config.OnRound).
type roundWatch struct {
	mu               sync.Mutex
	maxRound, maxGap time.Duration
	last             time.Time // when the last successful round ended
	clean            bool      // no failed round since last
}

func (w *roundWatch) observe(info hybrid.RoundInfo) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if info.Err != nil {
		w.clean = false
		return
	}
	w.maxRound = max(w.maxRound, info.Duration)
	if w.clean {
		w.maxGap = max(w.maxGap, now.Sub(w.last))
	}
	w.last, w.clean = now, true
}

func (w *roundWatch) result() (maxRound, maxGap time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxRound, w.maxGap
}

// ledgerRecords names every record the scenario's limits write to.
func ledgerRecords(sc *Scenario) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range sc.Keys {
		for _, l := range k.Limits {
			if r := ledgerOf(k.Name, l); !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// awaitRecovery waits until every open node has left degraded mode with its
// breaker closed.
func awaitRecovery(limiters []*hybrid.Limiter, open []bool) error {
	deadline := time.Now().Add(recoverWithin)
	for {
		var stuck []string
		for i, l := range limiters {
			if !open[i] {
				continue
			}
			if st := l.Stats(); st.Degraded || st.Breaker.String() != "closed" {
				stuck = append(stuck, fmt.Sprintf("node %d (degraded %v, breaker %v)", i, st.Degraded, st.Breaker))
			}
		}
		if len(stuck) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleetcheck: not recovered %v after the traffic ended: %s", recoverWithin, strings.Join(stuck, ", "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sleepUntil sleeps until t, unless t is less than a timer's resolution
// away.
func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 200*time.Microsecond {
		time.Sleep(d)
	}
}

// logSink keeps the first keepLogs lines the nodes log at Warn and above.
type logSink struct {
	store *logStore
	attrs []slog.Attr
}

type logStore struct {
	mu    sync.Mutex
	lines []string
}

func newLogSink() *logSink { return &logSink{store: &logStore{}} }

func (s *logSink) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range s.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	if len(s.store.lines) < keepLogs {
		s.store.lines = append(s.store.lines, b.String())
	}
	return nil
}

func (s *logSink) WithAttrs(as []slog.Attr) slog.Handler {
	return &logSink{store: s.store, attrs: append(slices.Clone(s.attrs), as...)}
}

func (s *logSink) WithGroup(string) slog.Handler { return s }

// lines returns what was logged.
func (s *logSink) lines() []string {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return slices.Clone(s.store.lines)
}
