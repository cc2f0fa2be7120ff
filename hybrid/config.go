package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/breaker"
	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/sync/round"
)

// Mode is how a Limiter makes its decisions: decide locally, in a shared
// store, or locally and reconcile, as one setting (docs/accuracy.md).
type Mode int

const (
	// Async decides from node memory and reconciles with Redis every
	// SyncInterval: well under a microsecond per decision, with an error
	// across nodes bounded by the interval (docs/accuracy.md). The zero
	// value, and the default. Kong calls it sync_rate > 0.
	Async Mode = iota
	// Sync decides in Redis, one script per decision: exact across nodes, at
	// a round trip per decision. Kong's sync_rate 0.
	Sync
	// LocalOnly decides from node memory alone: no Redis, each node its own
	// limit. Also what a Limiter does whenever Config.Redis is nil. Kong's
	// sync_rate -1.
	LocalOnly
)

func (m Mode) String() string {
	switch m {
	case Async:
		return "async"
	case Sync:
		return "sync"
	case LocalOnly:
		return "local"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Fallback is what a node does while degraded: Redis failed and the breaker
// is open.
type Fallback int

const (
	// Conservative enforces the global limit divided among the nodes: by
	// Config.FleetSize when set, else by the nodes last seen active on the
	// key, else by the nodes last seen in the fleet. The zero value.
	Conservative Fallback = iota
	// FailOpen admits every request. Its spend is still recorded and
	// reported when Redis returns.
	FailOpen
	// FailClosed denies every request until Redis returns.
	FailClosed
)

func (f Fallback) String() string {
	switch f {
	case Conservative:
		return "conservative"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("fallback(%d)", int(f))
}

// Defaults for Config's zero fields.
const (
	DefaultSyncInterval   = 20 * time.Millisecond
	DefaultRedisTimeout   = 50 * time.Millisecond
	DefaultStartupTimeout = 2 * time.Second
	DefaultEvictionCheck  = 10 * time.Second
)

// Config configures a Limiter. The zero value is a local-only limiter with
// default settings; set Redis for the other modes.
type Config struct {
	// Redis is the client the limiter shares state through: a single node, a
	// Sentinel failover client or a Cluster (redis.UniversalClient). Nil
	// means LocalOnly whatever Mode says. The client stays the caller's: the
	// limiter never closes it. In Sync mode give it ContextTimeoutEnabled:
	// then deadlines reach the socket and each call runs on the caller's
	// goroutine (tens of µs less per decision, docs/benchmarks.md);
	// without it each call is handed to a goroutine that can be abandoned
	// at RedisTimeout.
	Redis redis.UniversalClient
	// Prefix starts every Redis key the limiter writes. Zero means "rl:".
	Prefix string
	// Mode is how decisions are made. The zero value is Async.
	Mode Mode
	// SyncInterval is the time between reconciliation rounds in Async mode
	// (and the heartbeat in Sync mode). A zero SyncInterval means 20 ms.
	// docs/accuracy.md gives the error each interval buys.
	SyncInterval time.Duration
	// Fallback is what a node does while degraded. The zero value is
	// Conservative.
	Fallback Fallback
	// FleetSize, when set, is the number of nodes sharing the limits: in
	// degraded mode each enforces the limit divided by it, and in Async
	// mode no node's even split of a key is larger than one over it (a
	// node that has not yet heard every other's first heartbeat may
	// otherwise divide by a smaller fleet). Zero means the most nodes seen
	// active in Redis within the active window; then New, in Async mode,
	// waits two sync intervals (at most 100 ms) after the node's first
	// heartbeat and beats again, so that a fleet started together divides
	// by the nodes started with it. A node that starts while
	// Redis is down has seen nothing: with StartDegraded and the
	// Conservative fallback it needs FleetSize to start at all.
	// FleetSize is a floor, not a guess: with fewer nodes up, each still
	// decides in one over FleetSize, and a contested key holds an even
	// split back for each node FleetSize counts until it joins (a node
	// that may have decided in its split before it heard of the contest
	// reports it then), so a fleet smaller than FleetSize admits less than
	// the limit. Set it to the size the fleet runs at, and lower it when
	// the fleet is scaled down.
	FleetSize int
	// RedisTimeout bounds each decision's call to Redis in Sync mode: no
	// decision waits longer, whatever the client's own timeouts. Zero means
	// 50 ms.
	RedisTimeout time.Duration
	// BreakerOpenFor is how long the breaker stays open before it probes
	// Redis again. Zero means 1 s.
	BreakerOpenFor time.Duration
	// BreakerFailures is how many consecutive failed calls open the breaker.
	// Zero means 3.
	BreakerFailures uint32
	// ActiveWindow is how long a node counts as active on a key, and in the
	// fleet, after its last report. Zero means 50 intervals, at least 1 s.
	// Every node of a fleet must use the same (so the same SyncInterval, or
	// the same ActiveWindow set): in Async mode a node stops using its
	// grants an ActiveWindow after its last heartbeat, and the heartbeat of
	// whichever node finds it gone, by that node's ActiveWindow, lets the
	// others have them.
	ActiveWindow time.Duration
	// MaxKeys bounds the (key, limit) states held in memory: the least
	// recently used are evicted, their unreported spend is kept for the
	// reconciler, and a record per key remembers how spent they were, so an
	// evicted key never comes back with a burst it had used, while the
	// keys evicted spent within their refill time number at most MaxKeys
	// (beyond, the records turning fresh first are forgotten and counted in
	// Stats().EvictionsForgotten). Zero means 1,048,576. About 155 bytes of
	// live heap a key held (keys of up to 16 bytes), and about 50 more once
	// keys are evicted (the records, and the key table's queue); a process
	// holds up to about twice its live heap under Go's default GOGC, garbage
	// not yet collected included: set GOMEMLIMIT to bound it
	// (docs/benchmarks.md, "Memory: a million keys").
	MaxKeys int
	// MaxPending bounds the keys the reconciler keeps counts for: keys
	// reported recently, and keys with spend Redis has not acknowledged
	// (through an outage, every key spent on past its report threshold).
	// Spend beyond it is dropped, counted in Stats and logged once per
	// round. Zero means 1,048,576; about 150 bytes a key at rest, up to
	// about 2 KiB while a flood fills it. In Async mode without Ledger,
	// keys decided alone never wait here.
	MaxPending int
	// MaxPendingBytes bounds, in Sync mode, the memory of the spend waiting
	// for Redis (the reconciler's counters, as it estimates them: about 400
	// bytes a key plus the key), which grows through an outage. Zero means
	// 64 MiB (some 160,000 keys of 16 bytes); negative means no bound but
	// MaxPending. Spend of a new key beyond it is dropped, counted in
	// Stats().Reconcile.PendingDropped and LostSpend (and the metric
	// sync_pending_dropped_total), and logged once. docs/redis.md.
	MaxPendingBytes int64
	// MaxReports bounds the keys one reconciliation round reports in Sync
	// mode, the most pressing first (keys under pressure, leases to renew,
	// spend past its threshold, then spend of evicted keys), so that however
	// many keys a node holds, the keys under pressure are reconciled on
	// time. Zero means 8,000. Async mode sends each key's op when it is
	// ready, in batches, and does not use it.
	MaxReports int
	// Lease is how long a grant of a contested key (Async mode) holds
	// unless the node renews it while using the key: the node stops using
	// it two intervals before its end, and Redis then takes it back into
	// the key's pool, as wholly spent. Grants never add up to more than the
	// whole limit (docs/protocol.md). Zero means 50 intervals, at least 1 s.
	Lease time.Duration
	// HomeLease is how long, in Async mode, a home holds unless renewed: a
	// key only one node uses is granted whole to that node, which decides
	// it from memory, refusals included, while its requests come less than
	// half a HomeLease apart (renewing it every half HomeLease while used,
	// one small op). Another node that asks for the key ends the home
	// within a round trip, and a node that stops beating (a crash, a
	// partition from Redis) uses none of its grants an ActiveWindow after
	// its last heartbeat: the others have them then, whatever the lease.
	// Zero means 20 s, at least Lease.
	HomeLease time.Duration
	// Ledger keeps, in Async mode, every key's ledger in Redis: what the
	// fleet admitted on it, read back with remote.Store.AsyncLedger, for
	// usage accounting and audits. It costs Redis a small write per key
	// decided (one entry per key and node about every 10 intervals while
	// the key is in use, about 6 µs of Redis CPU each, and one per key the
	// node still holds when it closes). Without it, which is the default, a
	// key no node needs more than its even share of costs Redis nothing,
	// and only contested keys' ops reach Redis.
	Ledger bool
	// LedgerTTL is how long a key's ledger in Redis (what the fleet admitted
	// on it, Async mode with Ledger) lives after the last weight added to it:
	// the window in which usage can be read back. Zero means 1 hour.
	LedgerTTL time.Duration
	// AskWait bounds how long, in Async mode, a request this node's share
	// of its key cannot admit waits for the fleet to make room for it: the
	// node asks Redis, and the nodes that hold room they do not need give
	// it back, within a few round trips. Zero means two intervals, at
	// most 100 ms; ctx bounds it too. If Redis has the request's ask in
	// hand when AskWait ends and has not answered, the request waits for
	// that answer up to RedisTimeout more: the answer decides it, or the
	// call fails and, the breaker open, it is decided under the Fallback
	// like every other while Redis is down (a Redis that fails without
	// the breaker opening: refused). Negative means never: such a request is refused from
	// the node's share at once, and the fleet admits less than the limit
	// whenever a client's traffic is uneven over the nodes. Requests that
	// fit the node's share never wait, nor does any request while the
	// breaker is open, nor one the fleet is known to have no room for.
	AskWait time.Duration
	// ShortLease is how long a share larger than an even split of the fleet
	// holds in the leases of Sync mode's reconciliation. Async mode's grants
	// hold for Lease and do not use it. Zero means 5 intervals, at least a
	// tenth of Lease.
	ShortLease time.Duration
	// Node names this node in Redis. Zero means host name, process id and a
	// random suffix.
	Node string
	// StartDegraded lets New succeed while Redis is unreachable: the limiter
	// starts degraded and finds Redis when it returns. By default New
	// returns an error wrapping ErrRedisUnavailable instead. With the
	// Conservative fallback and no FleetSize, New still returns that error
	// when Redis is down at start, saying so: the node has not seen the
	// fleet, and would take each limit whole. When Redis answers at start,
	// FleetSize is not needed: the node learns the fleet from Redis.
	StartDegraded bool
	// EvictionCheck is how often the limiter reads Redis's count of evicted
	// keys (INFO stats), to log and count evictions that may have taken its
	// own keys (Stats().Faults.Evictions): one cheap command per node. Zero
	// means 10 s; negative, never. The maxmemory-policy is read at start
	// whatever it is.
	EvictionCheck time.Duration
	// StartupTimeout bounds New's first contact with Redis, the whole of it
	// (loading the scripts, the eviction check, the first heartbeat): the
	// per-call timeouts do not apply, so a Redis that is slow at start is
	// not taken for a dead one. Zero means 2 s.
	StartupTimeout time.Duration
	// Clock is the limiter's clock. Nil means the real clock.
	Clock clock.Clock
	// Logger receives, once each: the breaker's transitions (open with its
	// cause, and open again after a failed probe, at Warn; half-open and
	// closed at Info), the start (Warn) and the end (Info) of degraded mode,
	// an eviction policy that can evict the limiter's keys, the first keys
	// Redis is seen to evict while the limiter runs, a key of another
	// type in Redis (once per key), a clock step, and any lost spend. It is
	// called outside the limiter's and the breaker's locks. Nil means
	// slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is told of every reconciliation round: how many keys,
	// how long, and why it failed if it did (metrics.Recorder.ObserveRound
	// fits). It runs on the reconciler's goroutine, outside its locks.
	OnRound func(RoundInfo)
}

// RoundInfo describes one reconciliation round (round.Info), so
// callers of hybrid need not import the reconciler.
type RoundInfo = round.Info

// effectiveMode is the mode the limiter runs in.
func (c *Config) effectiveMode() Mode {
	if c.Redis == nil {
		return LocalOnly
	}
	return c.Mode
}

// withDefaults checks c and fills its zero fields, so that what the
// limiter logs and reports are the values in force.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.RedisTimeout == 0 {
		c.RedisTimeout = DefaultRedisTimeout
	}
	if c.ActiveWindow == 0 {
		c.ActiveWindow = max(50*c.SyncInterval, time.Second)
	}
	if c.Lease == 0 {
		c.Lease = max(50*c.SyncInterval, time.Second)
	}
	if c.ShortLease == 0 {
		c.ShortLease = min(max(5*c.SyncInterval, c.Lease/10), c.Lease)
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = DefaultStartupTimeout
	}
	if c.EvictionCheck == 0 {
		c.EvictionCheck = DefaultEvictionCheck
	}
	if c.BreakerOpenFor == 0 {
		c.BreakerOpenFor = breaker.DefaultOpenFor
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = breaker.DefaultFailures
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// validate reports every mistake in c at once, each naming its field and
// value: "hybrid: LedgerTTL is negative (-1ns)".
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("hybrid: "+format, args...)) }
	if c.Mode < Async || c.Mode > LocalOnly {
		bad("Mode %d is unknown (want Async, Sync or LocalOnly)", int(c.Mode))
	}
	if c.Fallback < Conservative || c.Fallback > FailClosed {
		bad("Fallback %d is unknown (want Conservative, FailOpen or FailClosed)", int(c.Fallback))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
		min  time.Duration // the least a non-zero value may be
	}{
		{"SyncInterval", c.SyncInterval, time.Millisecond},
		{"RedisTimeout", c.RedisTimeout, 0},
		{"BreakerOpenFor", c.BreakerOpenFor, 0},
		{"ActiveWindow", c.ActiveWindow, time.Millisecond},
		{"Lease", c.Lease, time.Millisecond},
		{"HomeLease", c.HomeLease, time.Millisecond},
		{"LedgerTTL", c.LedgerTTL, 0},
		{"ShortLease", c.ShortLease, time.Millisecond},
		{"StartupTimeout", c.StartupTimeout, 0},
	} {
		switch {
		case f.d < 0:
			bad("%s is negative (%v)", f.name, f.d)
		case f.d > 0 && f.d < f.min:
			bad("%s %v is below %v", f.name, f.d, f.min)
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"FleetSize", c.FleetSize}, {"MaxKeys", c.MaxKeys}, {"MaxPending", c.MaxPending}, {"MaxReports", c.MaxReports}} {
		if f.n < 0 {
			bad("%s is negative (%d)", f.name, f.n)
		}
	}
	if c.Lease > 0 && c.ShortLease > c.Lease {
		bad("ShortLease %v is longer than Lease %v", c.ShortLease, c.Lease)
	}
	return errors.Join(errs...)
}
