package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// The store's side of Async mode's share protocol (package share): each
// contested key's hash (shares.lua) and the registry of contested keys every
// node reads at its heartbeat (registry.lua), with calls published on a
// channel for the nodes to hear at once.

// shareArgsPerOp and shareValuesPerOp are shares.lua's per-key values in
// (packed in one argument: opArgs) and out.
const (
	shareArgsPerOp   = 30
	shareValuesPerOp = 20
)

// ShareOps applies ops (one per key) with settings set, in one round trip
// per Redis node (a batch of keys per script call on a single Redis, one
// key per call on a Cluster), and fills replies, one per op. It returns an
// error when every op failed (Redis unreachable); an op's own fault (a key
// of another type) is in its reply's Err.
func (s *Store) ShareOps(ctx context.Context, set share.Settings, ops []share.Op, replies []share.Reply) error {
	per := keysPerCall
	if _, single := s.client.(*redis.Client); !single {
		per = 1
	}
	var calls []*call
	var cur *call
	for i, op := range ops {
		replies[i] = share.Reply{}
		p, err := sharedParams(op)
		if err != nil {
			replies[i].Err = err
			continue
		}
		if cur == nil || len(cur.reports) == per {
			cur = &call{script: s.scripts.shares, args: settingsArgs(s.node, set, s.callsChannel())}
			calls = append(calls, cur)
		}
		cur.keys = append(cur.keys, asyncKey(s.prefix, op.Limit, op.Key))
		cur.args = append(cur.args, opArgs(p, op)...)
		cur.reports = append(cur.reports, i)
	}
	if len(calls) == 0 {
		return roundError(replies, func(r share.Reply) error { return r.Err })
	}
	s.run(ctx, calls)
	for _, c := range calls {
		readReplies(c, ops, replies)
	}
	return roundError(replies, func(r share.Reply) error { return r.Err })
}

// settingsArgs are shares.lua's arguments before the ops': the node, the
// settings, the departures it knows of, and the channel the calls it makes
// are published on.
func settingsArgs(node string, set share.Settings, channel string) []any {
	args := make([]any, 0, 8+2*len(set.Gone))
	args = append(args, node, set.Lease, set.CallWindow, set.Cooldown, set.Recovery, max(set.HomeLease, set.Lease), len(set.Gone))
	for _, g := range set.Gone {
		args = append(args, g.Node, g.At)
	}
	return append(args, channel)
}

// sharedParams returns op's limit in the store's units, or why it cannot be
// sent.
func sharedParams(op share.Op) (share.Params, error) {
	p, ok := share.ParamsOf(op.Limit)
	if !ok {
		return p, &Error{Kind: ErrRedis, Op: "shares", Key: op.Key, Err: ErrNotReconcilable}
	}
	if err := op.Limit.Validate(); err != nil {
		return p, err
	}
	return p, limit.CheckKey(op.Key)
}

// opArgs is one op's argument to shares.lua: its shareArgsPerOp values as
// little-endian float64s in one string, which the script reads with one
// struct.unpack, then the key's registry member (claimMember), which names
// the key in a call the script publishes. Sent as decimal strings, each
// value was a tonumber in Lua (a strtod): about 5% of what an op cost Redis
// (BenchmarkShareOps). A float64 holds each value as Lua's tonumber did:
// rounded to the nearest double.
func opArgs(p share.Params, op share.Op) []any {
	b := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	serve := int64(0) // 0: no; else 1 + the weight of each request served (op.Each, 0: they differ)
	if op.Serve {
		serve = 1 + max(op.Each, 0)
	}
	vals := [shareArgsPerOp]int64{int64(p.Kind), p.Interval, p.Tolerance, p.Capacity, p.Period, p.Rate,
		op.Epoch, op.Held, op.Keep, op.State.Level, op.State.Window, op.State.Count, op.State.Prev, op.At,
		op.Want, op.AskedAt, op.Need, int64(max(op.Fleet, 1)), b(op.Pooled), b(op.Join), b(op.Leave), serve,
		op.Seq, op.Full, op.Shadow, op.ShadowSince, b(op.Owed), op.Applied, op.Heard, op.ResetHeard}
	member := claimMember(op.Key, op.Limit.Canonical())
	buf := make([]byte, 0, 8*shareArgsPerOp+len(member))
	for _, v := range vals {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(float64(v)))
	}
	return []any{string(append(buf, member...))}
}

// readReplies reads one call's reply into the replies of its ops.
func readReplies(c *call, ops []share.Op, out []share.Reply) {
	fail := func(err error) {
		for _, i := range c.reports {
			out[i] = share.Reply{Err: classify("shares", ops[i].Key, err)}
		}
	}
	if c.err != nil {
		fail(c.err)
		return
	}
	if len(c.vals) != 1+shareValuesPerOp*len(c.reports) {
		fail(fmt.Errorf("%w: %d values for %d keys", ErrBadReply, len(c.vals), len(c.reports)))
		return
	}
	for j, i := range c.reports {
		vals := c.vals[1+j*shareValuesPerOp : 1+(j+1)*shareValuesPerOp]
		r, err := parseReply(vals)
		if err != nil {
			r.Err = classify("shares", ops[i].Key, err)
		}
		out[i] = r
	}
}

// parseReply reads one key's values.
func parseReply(vals []any) (share.Reply, error) {
	var r share.Reply
	if st, ok := vals[0].(int64); !ok || st != 1 {
		msg, _ := vals[1].(string)
		return r, scriptError(msg)
	}
	v, err := ints(vals, shareValuesPerOp)
	if err != nil {
		return r, err
	}
	if v[1] < int64(share.Done) || v[1] > int64(share.Ended) {
		return r, fmt.Errorf("%w: outcome %d", ErrBadReply, v[1])
	}
	r.Outcome = share.Outcome(v[1])
	r.Epoch, r.Grant, r.Growth = v[2], min(max(v[3], 0), share.One), max(v[4], 0)
	r.Pool = share.State{Level: v[5], Window: v[6], Count: v[7], Prev: v[8]}
	r.LeaseEnd, r.Expiry, r.Until = v[9], v[10], v[11]
	r.Lost, r.Over, r.Replace = v[12] == 1, v[13] == 1, v[14] == 1
	r.Served, r.ServedAt, r.Now = v[15], v[16], v[17]
	r.Exact = r.Outcome == share.NoRoom && v[18] == 1
	r.Reset = max(v[19], 0)
	return r, nil
}

// ShareBeat sends this node's heartbeat b and reads the fleet's answer into
// r.
func (s *Store) ShareBeat(ctx context.Context, b *share.Beat, r *share.BeatReply) error {
	c := s.beatCall(b)
	s.run(ctx, []*call{c})
	return readBeat(c, b, r)
}

// beatCall is the script call of heartbeat b.
func (s *Store) beatCall(b *share.Beat) *call {
	leave := 0
	if b.Leave {
		leave = 1
	}
	most := b.Limit
	if most <= 0 {
		most = math.MaxInt32 // no limit on the changes returned
	}
	args := []any{s.node, s.active.Microseconds(), leave, b.From, most, s.callsChannel(), b.GoneKeep}
	for _, c := range b.Contests {
		quiet := 0 // 1: quiet; 2: published already (shares.lua), not published again
		switch {
		case c.Quiet:
			quiet = 1
		case c.Published:
			quiet = 2
		}
		args = append(args, claimMember(c.Key, c.Limit.Canonical()), c.Epoch, c.CallAt, c.Expiry, c.Reset, quiet)
	}
	return &call{script: s.scripts.registry, keys: s.registryKeys[:], args: args}
}

// readBeat reads registry.lua's reply into r.
func readBeat(c *call, b *share.Beat, r *share.BeatReply) error {
	if c.err != nil {
		return classify("heartbeat", "", c.err)
	}
	head, err := ints(c.vals, 5)
	if err != nil {
		return classify("heartbeat", "", err)
	}
	*r = share.BeatReply{Now: head[0], Nodes: int(head[1]), New: head[2] == 1, Next: head[3], More: head[4] == 1,
		Changes: r.Changes[:0], Gone: r.Gone[:0]}
	rest := c.vals[5:]
	for i := 0; i+1 < len(rest); i += 2 {
		member, _ := rest[i].(string)
		value, _ := rest[i+1].(string)
		t, err := entryValue(value)
		if err != nil {
			return classify("heartbeat", "", err)
		}
		if id, ok := strings.CutPrefix(member, goneMember); ok {
			r.Gone = append(r.Gone, share.Departure{Node: id, At: t[0]})
			continue
		}
		key, lim, ok := parseClaimMember(member)
		if !ok {
			continue // not ours (another version's member): ignored
		}
		r.Changes = append(r.Changes, share.Contest{Key: key, Limit: lim, Epoch: t[0], CallAt: t[1], Expiry: t[2], Reset: t[3]})
	}
	return nil
}

// entryValue parses a registry entry's value as registry.lua stores it:
// "epoch call expiry reset", four integers (µs). An entry whose value is
// gone while its change's stamp stayed (the registry's hash evicted or
// deleted alone) reads empty: all zeros, a change that says nothing.
func entryValue(v string) ([4]int64, error) {
	var t [4]int64
	if v == "" {
		return t, nil
	}
	for i := range t {
		field, tail, _ := strings.Cut(v, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil || (i < 3) != (tail != "") {
			return t, fmt.Errorf("%w: registry entry %q", ErrBadReply, v)
		}
		t[i], v = n, tail
	}
	return t, nil
}

// goneMember prefixes a departure's registry member (registry.lua).
const goneMember = "gone|"

// callsChannel is the channel calls are published on.
func (s *Store) callsChannel() string { return s.prefix + "{fleet}:calls" }

// CallListener is told what the nodes publish on the fleet's channel.
// Nil fields are not told.
type CallListener struct {
	// Heard is told each call (and reset) published.
	Heard func(share.Contest)
	// Joined is told each node that joins the fleet: the fleet's size
	// then, the store's time (µs), and the node ("" from an earlier
	// release).
	Joined func(nodes int, at int64, member string)
	// Subscribed is told each time the subscription is confirmed: at
	// first, and again after go-redis has made a dropped connection again
	// (what was published meanwhile is lost: read it from the registry).
	// Until it is first told, the channel may not be heard at all (a
	// proxy without pub/sub, an ACL that denies SUBSCRIBE).
	Subscribed func()
}

// SubscribeCalls hears what the nodes publish (the fast path of a call,
// ahead of the registry the heartbeats read, and the nodes that join) and
// tells l, on a goroutine of its own, until stop is called. What is lost
// on the way is read at the next heartbeat all the same.
func (s *Store) SubscribeCalls(ctx context.Context, l CallListener) (stop func()) {
	ps := s.client.Subscribe(ctx, s.callsChannel())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ps.ChannelWithSubscriptions() {
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" && l.Subscribed != nil {
					l.Subscribed()
				}
			case *redis.Message:
				if c, ok := parseCall(m.Payload); ok {
					if l.Heard != nil {
						l.Heard(c)
					}
				} else if nodes, at, member, ok := parseJoined(m.Payload); ok && l.Joined != nil {
					l.Joined(nodes, at, member)
				}
			}
		}
	}()
	return func() {
		_ = ps.Close()
		<-done
	}
}

// parseCall reads a published call: member, epoch, call, expiry, reset, a
// line each. The member is everything before the last four lines: a key may
// hold any byte, a newline included.
func parseCall(payload string) (share.Contest, bool) {
	end := len(payload)
	for range 4 {
		if end = strings.LastIndexByte(payload[:end], '\n'); end < 0 {
			return share.Contest{}, false
		}
	}
	parts := strings.Split(payload[end+1:], "\n")
	key, lim, ok := parseClaimMember(payload[:end])
	if !ok || len(parts) != 4 {
		return share.Contest{}, false
	}
	var t [4]int64
	for i := range t {
		v, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil {
			return share.Contest{}, false
		}
		t[i] = v
	}
	return share.Contest{Key: key, Limit: lim, Epoch: t[0], CallAt: t[1], Expiry: t[2], Reset: t[3]}, true
}

// parseJoined reads a published join: the fleet's size, the store's time
// (µs) and the node that joined, a line each (an earlier release sends no
// node: member "").
func parseJoined(payload string) (nodes int, at int64, member string, ok bool) {
	parts := strings.SplitN(payload, "\n", 3)
	if len(parts) < 2 {
		return 0, 0, "", false
	}
	nodes, err := strconv.Atoi(parts[0])
	if err != nil || nodes <= 0 {
		return 0, 0, "", false
	}
	at, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, 0, "", false
	}
	if len(parts) == 3 {
		member = parts[2]
	}
	return nodes, at, member, true
}

// registryKeyNames are the registry's keys under prefix, in one Cluster
// slot: the fleet, the registry, its changes, its expiries, its stamp.
func registryKeyNames(prefix string) [5]string {
	base := prefix + "{fleet}"
	return [5]string{base + ":nodes", base + ":reg", base + ":changed", base + ":expires", base + ":stamp"}
}
