package remote

import (
	"context"
)

// The fleet of Sync mode: every node's heartbeat (fleet.lua), which tells
// each node how many nodes are active, to divide a limit by while Redis is
// down.

// Heartbeat is one node's heartbeat: what it tells the fleet, and what the
// fleet answers.
type Heartbeat struct {
	// Leave takes this node out of the fleet (it is closing): the others
	// divide by one node fewer at their next heartbeat, not after the
	// active window.
	Leave bool

	// Now is Redis's TIME (Unix ns), Nodes the nodes active in the fleet.
	Now   int64
	Nodes int
}

// heartbeatCall is the script call of heartbeat hb.
func (s *Store) heartbeatCall(hb *Heartbeat) *call {
	leave := 0
	if hb.Leave {
		leave = 1
	}
	return &call{script: s.scripts.fleet, keys: []string{s.fleetKey}, args: []any{s.node, s.active.Microseconds(), leave}}
}

// readHeartbeat reads the fleet script's reply into hb.
func readHeartbeat(c *call, hb *Heartbeat) error {
	if c.err != nil {
		return classify("heartbeat", "", c.err)
	}
	v, err := ints(c.vals, 2)
	if err != nil {
		return classify("heartbeat", "", err)
	}
	hb.Now, hb.Nodes = v[0]*1000, int(v[1])
	return nil
}

// Beat sends this node's heartbeat alone.
func (s *Store) Beat(ctx context.Context, hb *Heartbeat) error {
	c := s.heartbeatCall(hb)
	s.run(ctx, []*call{c})
	return readHeartbeat(c, hb)
}

// fleetKeyName is the fleet's key under prefix.
func fleetKeyName(prefix string) string { return prefix + "{fleet}" }
