package fleetcheck

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

// This file is the only one that knows how Redis records what was spent.
// Everything else asks ledgerOf which record holds a (key, limit), samples
// the records while the scenario runs, and reads held after quiescence.
//
// Today's format keeps no running total of a key's spend. The reconcile
// script keeps, in each key's hash, per node the totals it applied for the
// node's two latest counters ("epochs"): ea:<node>/ca:<node> and
// eb:<node>/cb:<node>. A node starts a counter per key and limit, a new one
// per window for the window algorithms, and again after a key went idle; so
// the record is read while the scenario runs (every sampleEvery), keeping
// the largest total seen per node and epoch, and what Redis holds is their
// sum. Its limits, which the ledger field will remove:
//
//   - a counter Redis drops at once (a node with three counters on one
//     hash: several limits of one algorithm on one key share it) is never
//     seen: it reads as spend Redis does not hold, which it does not;
//   - after Redis lost its data, the totals nodes report again read as held,
//     though Redis applied only what it had not acknowledged: the checker
//     asks no more there than "never more than admitted";
//   - Sync decisions are made by other scripts that keep no totals: in Sync
//     mode held reports that it cannot tell.

// ledgerPrefix is the Prefix every scenario's nodes write under.
const ledgerPrefix = "fc:"

// algorithmTags are remote's names for each algorithm's keys.
var algorithmTags = [...]string{
	limit.TokenBucket:          "tb",
	limit.LeakyBucket:          "lb",
	limit.FixedWindow:          "fw",
	limit.SlidingWindowLog:     "swl",
	limit.SlidingWindowCounter: "swc",
}

// ledgerOf names the Redis record that holds key's spend under lim. Limits
// whose records have one name share one record, and are checked together.
// Today that is the hash of the key under the limit's algorithm (the
// scenarios' keys are short printable ASCII, which remote uses as is).
func ledgerOf(key string, lim limit.Limit) string {
	return ledgerPrefix + algorithmTags[lim.Algorithm] + ":{" + key + "}"
}

// ledger samples Redis's records of spend. It is safe for concurrent use.
type ledger struct {
	rdb  redis.UniversalClient
	mode hybrid.Mode

	mu   sync.Mutex
	seen map[string]map[string]int64 // record → node and epoch → the largest total seen
}

func newLedger(rdb redis.UniversalClient, mode hybrid.Mode) *ledger {
	return &ledger{rdb: rdb, mode: mode, seen: make(map[string]map[string]int64)}
}

// sample reads the records once. A failed read (Redis killed or paused)
// keeps what was seen and returns the error.
func (l *ledger) sample(ctx context.Context, records []string) error {
	cmds := make([]*redis.MapStringStringCmd, len(records))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range records {
			cmds[i] = p.HGetAll(ctx, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range records {
		fields := cmds[i].Val()
		for f, v := range fields {
			var epoch string
			switch {
			case strings.HasPrefix(f, "ca:"):
				epoch = fields["ea:"+f[3:]]
			case strings.HasPrefix(f, "cb:"):
				epoch = fields["eb:"+f[3:]]
			default:
				continue
			}
			total, err := strconv.ParseInt(v, 10, 64)
			if err != nil || epoch == "" {
				continue
			}
			m := l.seen[r]
			if m == nil {
				m = make(map[string]int64)
				l.seen[r] = m
			}
			id := f[3:] + "/" + epoch
			m[id] = max(m[id], total)
		}
	}
	return nil
}

// held returns the spend record holds, and whether Redis's state can tell.
func (l *ledger) held(record string) (spent int64, known bool) {
	if l.mode != hybrid.Async {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.seen[record] {
		spent += t
	}
	return spent, true
}
