package remote

import (
	"context"
)

// The fleet of Sync mode: every node's heartbeat (fleet.lua).

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
}

// heartbeatCall is the script call of heartbeat hb.
func (s *Store) heartbeatCall(hb *Heartbeat) *call {
	mark := micros(hb.Mark)
	if hb.Leave {
		mark = -1
	}
	return &call{script: s.scripts.fleet, keys: s.fleetKeys[:], args: []any{s.node, s.active.Microseconds(), mark}}
}

// readHeartbeat reads the fleet script's reply into hb.
func readHeartbeat(c *call, hb *Heartbeat) error {
	if c.err != nil {
		return classify("heartbeat", "", c.err)
	}
	v, err := ints(c.vals, 3)
	if err != nil {
		return classify("heartbeat", "", err)
	}
	hb.Now, hb.Nodes, hb.Acked = v[0]*1000, int(v[1]), v[2]*1000
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

// fleetKeyNames are the fleet's keys under prefix, in one Cluster slot.
func fleetKeyNames(prefix string) [2]string {
	base := prefix + "{fleet}"
	return [2]string{base, base + ":marks"}
}
