package remote

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Async mode's ledger: what the fleet admitted on each key, kept apart from
// its contest (ledger.lua).

// LedgerEntry is a node's running ledger total on a key: all it admitted
// on the key since Epoch began.
type LedgerEntry struct {
	Key                 string
	Limit               limit.Limit
	Epoch, Total, Acked int64
}

// AddToLedgers adds entries to their keys' ledgers, idempotently, one
// pipeline. errs holds each entry's fault, if any; the error is the
// pipeline's own, or the first entry's when every one failed.
func (s *Store) AddToLedgers(ctx context.Context, entries []LedgerEntry, errs []error) error {
	per := keysPerCall
	if _, single := s.client.(*redis.Client); !single {
		per = 1
	}
	var calls []*call
	var cur *call
	for i, e := range entries {
		errs[i] = limit.CheckKey(e.Key)
		if errs[i] != nil {
			continue
		}
		if cur == nil || len(cur.reports) == per {
			cur = &call{script: s.scripts.ledger, args: []any{s.node, ms(s.ledgerTTL)}}
			calls = append(calls, cur)
		}
		cur.keys = append(cur.keys, ledgerKey(s.prefix, e.Limit, e.Key))
		cur.args = append(cur.args, e.Epoch, max(e.Total, 0), min(max(e.Acked, 0), max(e.Total, 0)))
		cur.reports = append(cur.reports, i)
	}
	if len(calls) == 0 {
		return nil
	}
	s.run(ctx, calls)
	ok := false
	for _, c := range calls {
		for j, i := range c.reports {
			switch {
			case c.err != nil:
				errs[i] = classify("ledger", entries[i].Key, c.err)
			case j < len(c.vals):
				if msg, isErr := c.vals[j].(string); isErr {
					errs[i] = classify("ledger", entries[i].Key, scriptError(msg))
				} else {
					ok = true
				}
			default:
				errs[i] = classify("ledger", entries[i].Key, ErrBadReply)
			}
		}
	}
	if !ok {
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// AsyncLedger returns the weight the nodes reported admitting on (key, lim)
// in Async mode: what the fleet admitted, once each node has flushed (Close).
func (s *Store) AsyncLedger(ctx context.Context, key string, lim limit.Limit) (int64, error) {
	return s.hgetInt(ctx, "ledger", key, ledgerKey(s.prefix, lim, key), "s")
}
