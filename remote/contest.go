package remote

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The shares of contested keys in Async mode (contest.lua), and the ledger
// of keys decided alone (ledger.lua).

// ShareReport is a node's report on one contested (key, limit): the share it
// decides in, its state, and what it wants. Reports are idempotent where
// they must be: the ledger's totals as Report's, and a growth the node never
// got the answer of is taken back when it reports again without having
// applied it.
type ShareReport struct {
	// Key and Limit identify the state.
	Key   string
	Limit limit.Limit
	// Grant is the share this node decides the key in now, in 1/GrantOne
	// of the limit: it shrinks to its target before it reports, never
	// after.
	Grant int64
	// State is this node's estimate of the key's state (local.Engine's
	// Estimate), and Now its Redis-aligned time then (Unix ns).
	State limit.State
	Now   int64
	// Applied is the sequence number of the last answer the node applied
	// (ShareAnswer.Seq); zero when it never joined the key.
	Applied int64
	// Demand is the weight this node was asked for, in requests per second.
	Demand float64
	// Epoch, Total and Acked are the ledger's running totals (see Report).
	Epoch, Total, Acked int64
	// Heavy, when positive, is the weight of a request to decide now: the
	// node grows from the pool as far as the request needs, if it can.
	Heavy int64
	// Claim marks the report of the node that claims the key.
	Claim bool
	// Leave marks the report of a node that stops: its share returns to the
	// pool (Grant must be zero), and it wants nothing more.
	Leave bool
	// Pressure reports that a request was denied since the last report:
	// the node takes half of what the pool has left beyond its target.
	Pressure bool
}

// ShareAnswer is the key's shares after a report.
type ShareAnswer struct {
	// Grant is this node's share now, in 1/GrantOne, valid until LeaseEnd
	// (Unix ns, Redis's clock); a lapsed lease leaves at most an even split.
	Grant    int64
	LeaseEnd int64
	// Growth is what the grant grew by from the pool, and Pool the pool's
	// state then (in estimate units, at Now): the node joins it to its own
	// state, weighted by the shares.
	Growth int64
	Pool   limit.State
	// Target is the share the node's demand earns it: above its grant, it
	// shrinks to it before it next reports.
	Target int64
	// Seq numbers this answer: the node names it in its next report once
	// applied (ShareReport.Applied).
	Seq int64
	// Lost: Redis had no record of a node that had one (the key was evicted,
	// deleted, or Redis restarted empty). Admitted: the Heavy request was.
	// Recall: the node's want cannot be met from the pool while others hold
	// more than they want: every node holding the key should report it.
	// Over: the node decided in more than Redis had granted it. FromPool:
	// the admitted request was served from the pool, which holds its spend
	// (else the node grew and holds it in its own state). Reset: the key was
	// reset (Store.ResetShares) since the node's state of it began: the node
	// starts it afresh, keeping its share.
	Lost, Admitted, Recall, Over, FromPool, Reset bool
	// Nodes is how many nodes are active on the key, and Demand their total
	// demand (requests per second).
	Nodes  int
	Demand float64
	// Now is Redis's TIME at the report (Unix ns).
	Now int64
	// Err is this key's fault, if the report failed.
	Err error
}

// ShareRound is the outcome of one batch of share reports, with the
// heartbeat it carried, if any.
type ShareRound struct {
	// Fleet is the fleet's size and Acked the fleet's acked time (Unix ns),
	// as the caller last knew them (set before calling).
	Fleet int
	Acked int64
	// Heartbeat, if set, is sent in the same pipeline, first.
	Heartbeat *Heartbeat
	// Answers holds one answer per report, in order.
	Answers []ShareAnswer
}

// shareValuesPerKey is how many values contest.lua returns per key.
const shareValuesPerKey = 13

// Contest sends reports (and round.Heartbeat, if set) in one pipeline: one
// round trip per Redis node. It returns an error when the heartbeat, or every
// report, failed; a key's own fault is in its answer.
func (s *Store) Contest(ctx context.Context, reports []ShareReport, round *ShareRound) error {
	round.Answers = append(round.Answers[:0], make([]ShareAnswer, len(reports))...)
	per := keysPerCall
	if _, single := s.client.(*redis.Client); !single {
		per = 1
	}
	var calls []*call
	if round.Heartbeat != nil {
		calls = append(calls, s.heartbeatCall(round.Heartbeat))
	}
	first := len(calls)
	var cur *call
	for i, r := range reports {
		if err := shareable(r); err != nil {
			round.Answers[i].Err = err
			continue
		}
		if cur == nil || len(cur.reports) == per {
			cur = &call{script: s.scripts.contest, args: []any{s.node, s.active.Microseconds(), ms(s.ledgerTTL),
				s.lease.Microseconds(), s.short.Microseconds(), max(round.Fleet, 1), micros(round.Acked)}}
			calls = append(calls, cur)
		}
		cur.keys = append(cur.keys, asyncKey(s.prefix, r.Limit, r.Key))
		cur.args = append(cur.args, shareArgs(r)...)
		cur.reports = append(cur.reports, i)
	}
	if len(calls) == 0 {
		return nil
	}
	s.run(ctx, calls)
	var err error
	if round.Heartbeat != nil {
		err = readHeartbeat(calls[0], round.Heartbeat)
	}
	for _, c := range calls[first:] {
		s.shareAnswers(c, reports, round.Answers)
	}
	if err != nil {
		return err
	}
	return roundError(round.Answers, func(a ShareAnswer) error { return a.Err })
}

// shareable reports why r cannot be sent, if it cannot.
func shareable(r ShareReport) error {
	if r.Limit.Algorithm == limit.SlidingWindowLog || r.Limit.Calendar != limit.NoCalendar {
		return &Error{Kind: ErrRedis, Op: "contest", Key: r.Key, Err: ErrNotReconcilable}
	}
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	return limit.CheckKey(r.Key)
}

// shareArgs returns one report's fifteen script arguments.
func shareArgs(r ShareReport) []any {
	total := max(r.Total, 0)
	acked := min(max(r.Acked, 0), total)
	claim, pressure := 0, 0
	if r.Claim {
		claim = 1
	}
	if r.Leave {
		claim = 2
	}
	if r.Pressure {
		pressure = 1
	}
	grant := min(max(r.Grant, 0), GrantOne)
	head := func(kind int, unit, capacity int64) []any { return []any{kind, unit, capacity, grant} }
	var a []any
	switch r.Limit.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		level := int64(0)
		if r.State.TAT > r.Now {
			level = r.State.TAT - r.Now
		}
		a = append(head(0, int64(r.Limit.Interval()), int64(r.Limit.Tolerance())), level, 0, 0)
	default:
		kind := 1
		if r.Limit.Algorithm == limit.SlidingWindowCounter {
			kind = 2
		}
		a = append(head(kind, int64(r.Limit.Period/time.Microsecond), r.Limit.Rate),
			r.State.Window, max(r.State.Count, 0), max(r.State.Prev, 0))
	}
	return append(a, max(r.Applied, 0), max(r.Demand, 0), r.Epoch, total, acked, max(r.Heavy, 0), claim, pressure)
}

// shareAnswers reads one call's reply into the answers of its reports.
func (s *Store) shareAnswers(c *call, reports []ShareReport, out []ShareAnswer) {
	fail := func(err error) {
		for _, i := range c.reports {
			out[i] = ShareAnswer{Err: classify("contest", reports[i].Key, err)}
		}
	}
	if c.err != nil {
		fail(c.err)
		return
	}
	if len(c.vals) != 1+shareValuesPerKey*len(c.reports) {
		fail(fmt.Errorf("%w: %d values for %d keys", ErrBadReply, len(c.vals), len(c.reports)))
		return
	}
	now, err := ints(c.vals, 1)
	if err != nil {
		fail(err)
		return
	}
	for j, i := range c.reports {
		vals := c.vals[1+j*shareValuesPerKey : 1+(j+1)*shareValuesPerKey]
		a, err := parseShareAnswer(reports[i].Limit, now[0]*1000, vals)
		if err != nil {
			a.Err = classify("contest", reports[i].Key, err)
		}
		out[i] = a
	}
}

// parseShareAnswer reads one key's thirteen values.
func parseShareAnswer(lim limit.Limit, now int64, vals []any) (ShareAnswer, error) {
	a := ShareAnswer{Now: now}
	if st, ok := vals[0].(int64); !ok || st != 1 {
		msg, _ := vals[1].(string)
		return a, scriptError(msg)
	}
	v, err := ints(vals, shareValuesPerKey)
	if err != nil {
		return a, err
	}
	a.Grant = min(max(v[1], 0), GrantOne)
	a.LeaseEnd = v[2] * 1000
	a.Growth = max(v[3], 0)
	if lim.Algorithm.IsBucket() {
		a.Pool = limit.State{TAT: now + v[4]}
	} else {
		a.Pool = limit.State{Window: v[4], Count: v[5], Prev: v[6]}
	}
	a.Target = min(max(v[7], 0), GrantOne)
	a.Seq = v[8]
	a.Lost, a.Admitted, a.Recall, a.Over, a.FromPool = v[9]&1 != 0, v[9]&2 != 0, v[9]&4 != 0, v[9]&8 != 0, v[9]&16 != 0
	a.Reset = v[9]&32 != 0
	a.Nodes = int(v[10])
	a.Demand = float64(v[11]) / 1000
	return a, nil
}

// LedgerEntry is a node's running ledger total on a key it decided alone.
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
		cur.keys = append(cur.keys, asyncKey(s.prefix, e.Limit, e.Key))
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
	return s.hgetInt(ctx, "ledger", key, asyncKey(s.prefix, lim, key), "s")
}
