package remote

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The fleet: every node's heartbeat, and the claims that tell every node
// which keys are contested (fleet.lua).

// MaxMark is the processed mark of a node that never decides a key in its
// even share without Redis (a node in Sync mode): it holds no claim back.
const MaxMark = int64(1) << 53

// Heartbeat is one node's heartbeat: what it tells the fleet, and what the
// fleet answers.
type Heartbeat struct {
	// Mark is the time (Unix ns, Redis's clock) up to which this node has
	// processed the claims: for every claim changed before it, the node has
	// stopped deciding the key alone. MaxMark for a node that never does.
	Mark int64
	// From is the time (Unix ns, Redis's clock) after which to return
	// changed claims: Next of the previous heartbeat. Zero returns them all.
	From int64
	// Limit is the most claims to return; zero returns none.
	Limit int
	// Claims are this node's new or renewed claims.
	Claims []Claim
	// Leave takes this node out of the fleet (it is closing): the others
	// divide by one node fewer at their next heartbeat, not after the
	// active window.
	Leave bool

	// Now is Redis's TIME (Unix ns), Nodes the nodes active in the fleet.
	Now   int64
	Nodes int
	// Acked is the earliest processed mark of the active nodes (Unix ns):
	// every claim made before it is known to the whole fleet.
	Acked int64
	// Next is the From of the next heartbeat.
	Next int64
	// Changed are the claims changed after From, oldest first.
	Changed []Claim
}

// Claim says that (Key, Limit) is contested until Expiry (Unix ns, Redis's
// clock).
type Claim struct {
	Key    string
	Limit  limit.Limit
	Expiry int64
}

// heartbeatCall is the script call of heartbeat hb.
func (s *Store) heartbeatCall(hb *Heartbeat) *call {
	mark := micros(hb.Mark)
	if hb.Leave {
		mark = -1
	}
	args := []any{s.node, s.active.Microseconds(), mark, hb.Limit, micros(hb.From)}
	for _, c := range hb.Claims {
		args = append(args, claimMember(c.Key, c.Limit), micros(c.Expiry))
	}
	return &call{script: s.scripts.fleet, keys: s.fleetKeys[:], args: args}
}

// readHeartbeat reads the fleet script's reply into hb.
func readHeartbeat(c *call, hb *Heartbeat) error {
	if c.err != nil {
		return classify("heartbeat", "", c.err)
	}
	v, err := ints(c.vals, 4)
	if err != nil {
		return classify("heartbeat", "", err)
	}
	hb.Now, hb.Nodes, hb.Acked, hb.Next = v[0]*1000, int(v[1]), v[2]*1000, v[3]*1000
	hb.Changed = hb.Changed[:0]
	rest := c.vals[4:]
	for i := 0; i+1 < len(rest); i += 2 {
		member, _ := rest[i].(string)
		key, lim, ok := parseClaimMember(member)
		if !ok {
			continue // not ours (another version's member): ignored
		}
		t, err := ints(rest[i+1:i+2], 1)
		if err != nil {
			return classify("heartbeat", "", err)
		}
		hb.Changed = append(hb.Changed, Claim{Key: key, Limit: lim, Expiry: t[0] * 1000})
	}
	return nil
}

// Beat sends this node's heartbeat alone.
func (s *Store) Beat(ctx context.Context, hb *Heartbeat) error {
	c := s.heartbeatCall(hb)
	s.run(ctx, []*call{c})
	return readHeartbeat(c, hb)
}

// micros renders Unix ns as µs for the scripts, rounding down.
func micros(ns int64) int64 { return ns / 1000 }

// claimMember names (key, lim) in the claims: the algorithm, the limit, then
// the key itself, which may hold any byte.
func claimMember(key string, lim limit.Limit) string {
	return algorithmTags[lim.Algorithm] + "|" + limitTag(lim) + "|" + key
}

// parseClaimMember reads a claim member back.
func parseClaimMember(m string) (string, limit.Limit, bool) {
	alg, rest, ok := strings.Cut(m, "|")
	if !ok {
		return "", limit.Limit{}, false
	}
	tag, key, ok := strings.Cut(rest, "|")
	if !ok || key == "" {
		return "", limit.Limit{}, false
	}
	var lim limit.Limit
	found := false
	for a, t := range algorithmTags {
		if t == alg {
			lim.Algorithm, found = limit.Algorithm(a), true
		}
	}
	parts := strings.Split(tag, "/")
	if !found || len(parts) < 2 {
		return "", limit.Limit{}, false
	}
	rate, err1 := strconv.ParseInt(parts[0], 10, 64)
	period, err2 := time.ParseDuration(parts[1])
	if err1 != nil || err2 != nil {
		return "", limit.Limit{}, false
	}
	lim.Rate, lim.Period = rate, period
	if len(parts) == 3 {
		burst, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return "", limit.Limit{}, false
		}
		if burst != rate {
			lim.Burst = burst
		}
	}
	if lim.Validate() != nil || limitTag(lim) != tag {
		return "", limit.Limit{}, false
	}
	return key, lim, true
}

// fleetKeyNames are the fleet's keys under prefix, in one Cluster slot.
func fleetKeyNames(prefix string) [4]string {
	base := prefix + "{fleet}"
	return [4]string{base, base + ":claims", base + ":expiry", base + ":marks"}
}
