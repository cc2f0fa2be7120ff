package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Report is what this node has spent on one (key, limit), and what it asks
// of the fleet's state for it. It is idempotent: it says how much the node
// spent in all since Epoch began, and Redis applies only what it has not
// applied from this node and epoch before. Sending a report twice, or an old
// one late, changes nothing, so a round whose answer was lost can be sent
// again without counting anything twice.
type Report struct {
	// Key and Limit identify the global state.
	Key   string
	Limit limit.Limit
	// Epoch identifies the node's counter for this key: it grows, and a node
	// starts a new one when it starts counting the key afresh. Redis keeps
	// the node's two latest epochs per key; an older one is ignored.
	Epoch int64
	// Total is the weight admitted since Epoch began: what the key's ledger
	// counts.
	Total int64
	// Refilled is the part of Total that no longer weighs on the limit: of
	// spend made while degraded, what had refilled by the time the node
	// could report it (local.Spend.Charge). Spend counts at the time it was
	// made: a client that stayed within its limit through an outage is not
	// charged for it again afterwards. Zero (the default) charges all.
	Refilled int64
	// Acked and AckedRefilled are the parts of Total and Refilled Redis has
	// acknowledged to this node. When Redis has no record of the epoch (it
	// forgot a node silent for longer than 60 active windows, or lost its
	// data) it applies only what exceeds them.
	Acked, AckedRefilled int64
	// Window is, for the window algorithms, the window Total was counted in.
	Window int64
	// Demand is the weight this node was asked for, admitted or not, in
	// requests per second: how the fleet divides the limit among nodes.
	Demand float64
	// Estimate is this node's estimate of the key's global state, and Now
	// its Redis-aligned time then (Unix ns): what Redis restores the state to
	// at least when it finds it lost.
	Estimate limit.State
	Now      int64
	// Heavy, when positive, is the weight of a request this node cannot
	// decide from its share: Redis decides it on the global state, after
	// applying the report, and spends it if admitted (Answer.Admitted). The
	// node then counts it in its Total.
	Heavy int64
	// Uncertain names the sync decisions (Store.AllowNKnown's Known.Seq)
	// that timed out, so their fate in Redis is unknown, and that the node
	// also decided, and counted in Total, in memory: the weight of each that
	// Redis did apply is not applied again, and each that it did not is
	// fenced off, so that the call, should it still arrive, changes nothing.
	// However many there are: Redis keeps every decision of the node above
	// SeqLow (see Known.Low). Total must not count the weight of a timed-out
	// decision the report does not name.
	Uncertain []Uncertain
	// SeqLow is the node's low mark of sequence numbers (Known.Low): Redis
	// forgets the decisions at or below it.
	SeqLow int64
}

// Uncertain is a sync decision that timed out: its sequence number and
// weight.
type Uncertain struct {
	Seq, N int64
}

// uncertainArg encodes us as the reconcile script reads it: "seq:n seq:n",
// or "0" for none.
func uncertainArg(us []Uncertain) string {
	if len(us) == 0 {
		return "0"
	}
	b := make([]byte, 0, len(us)*24)
	for _, u := range us {
		if u.Seq <= 0 || u.N <= 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, u.Seq, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, u.N, 10)
	}
	if len(b) == 0 {
		return "0"
	}
	return string(b)
}

// Answer is the global state of one key after a report was applied.
type Answer struct {
	// State is the key's global state, spend of every node included.
	State limit.State
	// Now is Redis's TIME when the report was applied, in Unix ns.
	Now int64
	// Nodes is how many nodes are active on the key, this one included, and
	// Demand their total demand (requests per second).
	Nodes  int
	Demand float64
	// Grant is this node's share of the limit, in 1/32768 of it (zero: none
	// left by the other nodes' leases), valid until LeaseEnd (Unix ns on
	// Redis's clock).
	Grant    int64
	LeaseEnd int64
	// Lost reports that Redis had lost state this node had reported (the key
	// was evicted, deleted or rolled back): it was restored to at least this
	// node's estimate and the node's totals applied again.
	Lost bool
	// Admitted reports that the report's Heavy request was admitted.
	Admitted bool
	// Err is this key's fault, if the report could not be applied; the other
	// keys of the round may still have succeeded.
	Err error
}

// GrantOne is the Grant of the whole limit.
const GrantOne = 32768

// Round is the outcome of one reconciliation round, and what the caller
// tells Redis of the fleet.
type Round struct {
	// Fleet is the number of nodes the caller believes share the limits
	// (set before calling): a grant above an even split among them holds
	// only for the short lease.
	Fleet int
	// NoHeartbeat leaves the node's heartbeat out (set before calling): for
	// a report made on the decision path, between rounds.
	NoHeartbeat bool
	// Now is Redis's TIME at the round's heartbeat, in Unix ns; Nodes is how
	// many nodes are active in the fleet. Both are zero when the heartbeat
	// failed.
	Now   int64
	Nodes int
	// HeartbeatFault is set when the heartbeat failed for its own keys (the
	// fleet's keys hold values of another type, IsKeyFault) while Redis
	// answered: the reports were still applied, and Reconcile's error says
	// only how they fared. The node learns neither the fleet nor the time.
	HeartbeatFault error
	// Answers holds one Answer per Report, in order.
	Answers []Answer
}

// ErrNotReconcilable is a report's error for a limit whose state cannot be
// merged from summaries: the sliding window log, whose exact log of
// timestamps cannot (use it in Sync mode), and, in Async mode, calendar
// windows.
var ErrNotReconcilable = errors.New("remote: the sliding window log cannot be reconciled")

// keysPerCall is how many keys one reconcile script call takes on a single
// Redis: enough to spread the cost of running a script, few enough that Redis
// answers its other clients between calls (it takes Redis about a
// millisecond). A Cluster or Ring routes by key, so there a call takes one
// key.
const keysPerCall = 200

// Values the reconcile script returns per key.
const valuesPerKey = 9

// Reconcile applies a node's reports and beats its heartbeat in one pipeline:
// one round trip per Redis node (a Cluster client groups the pipeline by
// slot owner). Each report refills its key by Redis TIME, subtracts what was
// spent and not yet applied (into debt where the fleet over-admitted),
// records this node's demand, and answers with the global state. Scripts
// Redis has lost are sent again (one more round trip, only then).
//
// Reports of one key must come in the order of their epochs (a window's
// counter for the previous window before the current one's).
//
// round.Answers is reused. Reconcile returns an error when the heartbeat or
// every report failed; when only some keys failed, their Answer.Err says so.
func (s *Store) Reconcile(ctx context.Context, reports []Report, round *Round) error {
	round.Answers = append(round.Answers[:0], make([]Answer, len(reports))...)
	per := keysPerCall
	if _, single := s.client.(*redis.Client); !single {
		per = 1
	}
	hb := &Heartbeat{}
	calls := []*call{s.heartbeatCall(hb)}
	if round.NoHeartbeat {
		calls = calls[:0]
	}
	var cur *call
	for i, r := range reports {
		if err := reconcilable(r); err != nil {
			round.Answers[i].Err = err
			continue
		}
		if cur == nil || len(cur.reports) == per {
			cur = &call{script: s.scripts.reconcile, args: []any{s.node, s.active.Microseconds(), ms(s.active),
				s.lease.Microseconds(), s.short.Microseconds(), max(round.Fleet, 1)}}
			calls = append(calls, cur)
		}
		cur.keys = append(cur.keys, redisKey(s.prefix, r.Limit, r.Key))
		cur.args = append(cur.args, reconcileArgs(r)...)
		cur.reports = append(cur.reports, i)
	}
	s.run(ctx, calls)

	var err error
	if round.NoHeartbeat {
		for _, c := range calls {
			s.answers(c, reports, round.Answers)
		}
		if len(calls) > 0 && calls[0].err != nil {
			return classify("reconcile", "", calls[0].err)
		}
		return nil
	}
	round.Now, round.Nodes, round.HeartbeatFault = 0, 0, nil
	if err = readHeartbeat(calls[0], hb); err == nil {
		round.Now, round.Nodes = hb.Now, hb.Nodes
	}
	for _, c := range calls[1:] {
		s.answers(c, reports, round.Answers)
	}
	if IsKeyFault(err) {
		// The fleet's keys are another's: the reports, on keys of their own,
		// stand or fall alone.
		round.HeartbeatFault = err
		return roundError(round.Answers, func(a Answer) error { return a.Err })
	}
	if err != nil {
		return err
	}
	return roundError(round.Answers, func(a Answer) error { return a.Err })
}

// roundError is a round's error: nil when any report succeeded, else the
// first failure Redis is to blame for (a report refused before it was sent
// says nothing about Redis), preferring one about Redis itself to one about
// a key.
func roundError[A any](answers []A, errOf func(A) error) error {
	var redisErr, keyErr error
	for _, a := range answers {
		err := errOf(a)
		switch {
		case err == nil:
			return nil
		case IsUnreportable(err):
		case IsKeyFault(err):
			if keyErr == nil {
				keyErr = err
			}
		case redisErr == nil:
			redisErr = err
		}
	}
	if redisErr != nil {
		return redisErr
	}
	return keyErr
}

// call is one script call of a reconcile round.
type call struct {
	script  *redis.Script
	keys    []string
	args    []any
	reports []int // the reports the call carries, by index
	vals    []any
	err     error
}

// run sends calls in one pipeline, and the ones Redis had lost the script of
// (restarted empty, SCRIPT FLUSH) again after loading it (see reloader).
func (s *Store) run(ctx context.Context, calls []*call) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.client.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var retry redis.Pipeliner
	re := reloader{client: s.client}
	for i, c := range calls {
		if isNoScript(cmds[i].Err()) {
			if retry == nil {
				retry = s.client.Pipeline()
			}
			cmds[i] = re.again(ctx, retry, c.script, c.keys, c.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, c := range calls {
		c.vals, c.err = cmds[i].Slice()
	}
}

// reconcilable reports why r cannot be reconciled, if it cannot.
func reconcilable(r Report) error {
	if r.Limit.Algorithm == limit.SlidingWindowLog {
		return &Error{Kind: ErrRedis, Op: "reconcile", Key: r.Key, Err: ErrNotReconcilable}
	}
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	return limit.CheckKey(r.Key)
}

// reconcileArgs returns one report's sixteen script arguments.
func reconcileArgs(r Report) []any {
	total, demand := max(r.Total, 0), max(r.Demand, 0)
	charge := total - min(max(r.Refilled, 0), total)
	acked := min(max(r.Acked, 0), total)
	ackedCharge := min(acked-min(max(r.AckedRefilled, 0), acked), charge)
	heavy := max(r.Heavy, 0)
	useq, low := uncertainArg(r.Uncertain), max(r.SeqLow, 0)
	switch r.Limit.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		level := max(r.Estimate.TAT-r.Now, 0)
		if r.Estimate.TAT == 0 {
			level = 0
		}
		return []any{0, int64(r.Limit.Interval()), int64(r.Limit.Tolerance()), r.Epoch, total, charge, acked, ackedCharge,
			0, demand, level, 0, 0, heavy, useq, low}
	default:
		kind := 1
		if r.Limit.Algorithm == limit.SlidingWindowCounter {
			kind = 2
		}
		return []any{kind, int64(r.Limit.Period / time.Microsecond), r.Limit.Rate, r.Epoch, total, charge, acked, ackedCharge,
			r.Window, demand, r.Estimate.Window, max(r.Estimate.Count, 0), max(r.Estimate.Prev, 0), heavy, useq, low}
	}
}

// answers reads one call's reply into the answers of the reports it carried.
func (s *Store) answers(c *call, reports []Report, out []Answer) {
	fail := func(err error) {
		for _, i := range c.reports {
			out[i] = Answer{Err: classify("reconcile", reports[i].Key, err)}
		}
	}
	if c.err != nil {
		fail(c.err)
		return
	}
	if len(c.vals) != 1+valuesPerKey*len(c.reports) {
		fail(fmt.Errorf("%w: %d values for %d keys", ErrBadReply, len(c.vals), len(c.reports)))
		return
	}
	now, err := ints(c.vals, 1)
	if err != nil {
		fail(err)
		return
	}
	for j, i := range c.reports {
		vals := c.vals[1+j*valuesPerKey : 1+(j+1)*valuesPerKey]
		a, err := parseAnswer(reports[i].Limit.Algorithm, now[0]*1000, vals)
		if err != nil {
			a.Err = classify("reconcile", reports[i].Key, err)
		}
		out[i] = a
	}
}

// parseAnswer reads one key's nine values: a status, three state numbers,
// the node count, the total demand, the grant, its lease end and the flags;
// or, when the status is 0, the error Redis raised for the key.
func parseAnswer(alg limit.Algorithm, now int64, vals []any) (Answer, error) {
	a := Answer{Now: now}
	v, err := ints(vals, 5)
	if err != nil {
		return a, err
	}
	if v[0] != 1 {
		msg, _ := vals[5].(string)
		return a, scriptError(msg)
	}
	d, err := ints(vals, valuesPerKey)
	if err != nil {
		return a, err
	}
	a.Nodes = int(v[4])
	a.Demand = float64(d[5]) / 1000
	a.Grant = min(max(d[6], 0), GrantOne)
	a.LeaseEnd = d[7] * 1000
	a.Lost = d[8]&1 != 0
	a.Admitted = d[8]&2 != 0
	if alg.IsBucket() {
		a.State.TAT = now + v[1]
	} else {
		a.State = limit.State{Window: v[1], Count: v[2], Prev: v[3]}
	}
	return a, nil
}

// scriptError is an error a script caught with redis.pcall and returned: a
// Redis error reply, as go-redis would have reported it.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a Redis error reply (redis.Error).
func (scriptError) RedisError() {}
