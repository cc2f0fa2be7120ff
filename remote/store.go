// Package remote is the Redis half of the limiter: one Lua script per
// algorithm, each atomic and each reading Redis server TIME so that no node's
// clock matters; the batched reconcile path that applies what a node spent;
// and key naming that is safe for Redis Cluster.
//
// A Store works with any redis.UniversalClient: a single node, a Sentinel
// failover client or a Cluster. Redis AUTH, ACL users and TLS are the
// client's business and pass through untouched. Scripts run by EVALSHA and
// fall back to EVAL when Redis has lost them (a restart, SCRIPT FLUSH), so a
// caller never sees NOSCRIPT.
//
// Every fault comes back as an *Error wrapping one kind (ErrUnavailable,
// ErrTimeout, ErrOOM, ErrWrongType, ErrBadReply, ErrRedis, ErrCanceled) so a
// caller can tell them apart with errors.Is. Nothing here panics on what
// Redis says.
package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Defaults for Options' zero fields.
const (
	DefaultPrefix       = "rl:"
	DefaultActiveWindow = 10 * time.Second
	DefaultLease        = time.Second
	DefaultLedgerTTL    = time.Hour
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key the store writes, so two limiters with
	// different prefixes never see each other's state. A zero Prefix means
	// DefaultPrefix. Printable ASCII without braces, at most 64 bytes.
	Prefix string
	// Node names this node in the fleet: its reports on a key and its
	// heartbeat are recorded under it. A zero Node means the host name, the
	// process id and a random suffix. Printable ASCII without spaces.
	Node string
	// ActiveWindow is how long a node counts as active, on a key and in the
	// fleet, after it last reported. A zero ActiveWindow means 10 s.
	ActiveWindow time.Duration
	// Lease is how long a share of a key granted by a reconcile report
	// holds: the grants Redis makes never add up to more than the whole
	// limit among leases that have not lapsed. A zero Lease means 1 s.
	Lease time.Duration
	// ShortLease is how long a share above an even split of the fleet
	// holds: how long a node that took most of a key keeps it once others
	// want some. A zero ShortLease means a tenth of Lease.
	ShortLease time.Duration
	// LedgerTTL is how long a key's ledger (what the fleet admitted on it,
	// Async mode) lives in Redis after the last weight added to it: the
	// window in which usage can be read back. It costs Redis a small hash
	// per key reported in that time. A zero LedgerTTL means 1 hour; it is
	// never shorter than the active window.
	LedgerTTL time.Duration
	// Now is the node's clock aligned to Redis server TIME, in Unix ns: a
	// calendar window is the one it falls in (and Redis takes a neighbour
	// if TIME disagrees). Nil means the system clock, which serves as long
	// as it is within a window of Redis's.
	Now func() int64
}

// Store runs the limiter's scripts on Redis. It is safe for concurrent use
// and holds no connection of its own: the client is the caller's.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	node      string
	active    time.Duration
	lease     time.Duration
	short     time.Duration
	ledgerTTL time.Duration
	fleetKey  string
	// registryKeys are Async's registry of contested keys (registry.lua).
	registryKeys [5]string
	scripts      scripts
	now          func() int64
	zones        limit.Zones // calendar limits' time zones
}

// New returns a Store on client. It does no I/O: use Ping to check Redis.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("remote: nil redis client")
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	node := opts.Node
	if node == "" {
		node = defaultNode()
	}
	if err := checkNode(node); err != nil {
		return nil, err
	}
	active := opts.ActiveWindow
	if active == 0 {
		active = DefaultActiveWindow
	}
	if active < time.Millisecond {
		return nil, fmt.Errorf("remote: ActiveWindow %v is below 1ms", active)
	}
	lease := opts.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	short := opts.ShortLease
	if short == 0 {
		short = lease / 10
	}
	if lease < time.Millisecond || short < time.Millisecond || short > lease {
		return nil, fmt.Errorf("remote: Lease %v and ShortLease %v must be at least 1ms, ShortLease at most Lease", lease, short)
	}
	now := opts.Now
	if now == nil {
		now = func() int64 { return clock.Real{}.Now().UnixNano() }
	}
	return &Store{
		client:       client,
		prefix:       prefix,
		node:         node,
		active:       active,
		lease:        lease,
		short:        short,
		ledgerTTL:    max(cmpOr(opts.LedgerTTL, DefaultLedgerTTL), active),
		fleetKey:     fleetKeyName(prefix),
		registryKeys: registryKeyNames(prefix),
		scripts:      newScripts(),
		now:          now,
	}, nil
}

// Lease returns how long a granted share holds.
func (s *Store) Lease() time.Duration { return s.lease }

// Node returns the name this store reports under.
func (s *Store) Node() string { return s.node }

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }

// Client returns the Redis client the store runs on.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Ping checks that Redis answers and loads the scripts into it (on every
// master of a Cluster), so the first decisions do not pay for EVAL.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return classify("load", "", err)
	}
	return s.scripts.load(ctx, s.client)
}

func defaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	node := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if checkNode(node) != nil { // a host name with odd bytes
		node = fmt.Sprintf("node-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	}
	return node
}

func checkNode(node string) error {
	if len(node) == 0 || len(node) > 128 {
		return fmt.Errorf("remote: Node name of %d bytes (want 1 to 128)", len(node))
	}
	for i := 0; i < len(node); i++ {
		if c := node[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("remote: Node name %q: byte %q not allowed (printable ASCII without spaces)", node, c)
		}
	}
	return nil
}

// ms renders d as whole milliseconds, rounded up, for script arguments.
func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// Ledger returns the weight Redis has applied to (key, lim) from every node's
// reports: what the fleet admitted, for an audit or for metering. Sync
// decisions are not in it (their state is exact; the ledger counts what
// nodes reported). A key Redis does not hold has spent nothing.
func (s *Store) Ledger(ctx context.Context, key string, lim limit.Limit) (int64, error) {
	if err := limit.CheckKey(key); err != nil {
		return 0, err
	}
	return s.hgetInt(ctx, "ledger", key, redisKey(s.prefix, lim, key), "s")
}

// hgetInt reads an integer field of a Redis key; a missing key or field is 0.
func (s *Store) hgetInt(ctx context.Context, op, key, rkey, field string) (int64, error) {
	v, err := s.client.HGet(ctx, rkey, field).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, classify(op, key, err)
	}
	return v, nil
}

// cmpOr returns d, or def when d is zero.
func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
