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
// sum. That is exact as long as no node has more than two counters alive on
// one hash between two samples; held says it cannot tell where that may
// fail, and the ledger field will remove the limits:
//
//   - the window algorithms: a node starts a counter per window, and one
//     round after an outage (or a round late on a busy machine) reports
//     several windows, all but two of whose totals are overwritten within
//     that one round;
//   - three or more bucket limits of one algorithm on one key, which share
//     one hash (Redis really drops the oldest counter's reports then, but
//     the reading cannot tell by how much);
//   - after Redis lost its data, the totals nodes report again read as held,
//     though Redis applied only what it had not acknowledged: the checker
//     asks no more there than "never more than admitted";
//   - Sync decisions are made by other scripts that keep no totals, so in
//     Sync mode held cannot tell either; nor can it for the sliding window
//     log, whose record is not a hash.

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

// sample reads the records once. A record that could not be read (Redis
// killed or paused) keeps what was seen of it; the first error is returned.
func (l *ledger) sample(ctx context.Context, records []string) error {
	cmds := make([]*redis.MapStringStringCmd, 0, len(records))
	names := make([]string, 0, len(records))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range records {
			if strings.HasPrefix(r, ledgerPrefix+algorithmTags[limit.SlidingWindowLog]+":") {
				continue // a sorted set of timestamps, no totals
			}
			cmds = append(cmds, p.HGetAll(ctx, r))
			names = append(names, r)
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range names {
		fields, cerr := cmds[i].Result()
		if cerr != nil {
			continue
		}
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
	return err
}

// held returns the spend record holds for the limits that share it (those
// of one key whose ledgerOf is record), and whether Redis's state can tell.
func (l *ledger) held(record string, limits []limit.Limit) (spent int64, known bool) {
	if l.mode != hybrid.Async || len(limits) == 0 || len(limits) > 2 || !limits[0].Algorithm.IsBucket() {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.seen[record] {
		spent += t
	}
	return spent, true
}
