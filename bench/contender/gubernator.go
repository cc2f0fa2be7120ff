package contender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/gubernator-io/gubernator/v2/cluster"
	"github.com/sirupsen/logrus"
)

// GubernatorModule is the Gubernator the comparison builds.
var GubernatorModule = mod("github.com/gubernator-io/gubernator/v2")

// Gubernator is an in-process Gubernator cluster: daemons started by its
// cluster package on free loopback ports, each knowing the others. Unlike
// the other contenders, its nodes share one limit through each other (every
// key has an owner, picked by consistent hashing), not through Redis.
//
// Only one Gubernator can run in a process at a time: the cluster package
// keeps its daemons in package variables.
type Gubernator struct {
	daemons []*gubernator.Daemon
}

// StartGubernator starts a cluster of n daemons, with the settings of
// Gubernator's cluster package (GlobalSyncWait 50 ms, where a daemon's
// default is 100 ms; every other behaviour setting at its default, such as
// BatchWait 500 µs). It lowers logrus's standard logger, which the daemons
// log to, to warnings.
func StartGubernator(n int) (*Gubernator, error) {
	if n < 1 {
		return nil, fmt.Errorf("contender: Gubernator needs at least one daemon, not %d", n)
	}
	if cluster.NumOfDaemons() > 0 {
		return nil, errors.New("contender: a Gubernator cluster is already running in this process")
	}
	logrus.SetLevel(logrus.WarnLevel)
	// A daemon knows itself by the address it was given, so the addresses
	// must be real ports, not ":0".
	addrs, err := freeAddrs(2 * n)
	if err != nil {
		return nil, err
	}
	peers := make([]gubernator.PeerInfo, n)
	for i := range peers {
		peers[i] = gubernator.PeerInfo{HTTPAddress: addrs[2*i], GRPCAddress: addrs[2*i+1]}
	}
	if err := cluster.StartWith(peers); err != nil {
		cluster.Stop()
		return nil, fmt.Errorf("contender: starting Gubernator: %w", err)
	}
	return &Gubernator{daemons: cluster.GetDaemons()}, nil
}

// freeAddrs returns n loopback addresses whose ports were free a moment ago.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, l.Addr().String())
		defer l.Close() // all held until every port is chosen, so none repeats
	}
	return addrs, nil
}

// Close stops every daemon. It first lets the cluster go quiet (ten
// GlobalSyncWaits), because v2.13.0 can hang in Daemon.Close while a GLOBAL
// round is pending: its Interval sends on a full channel without watching
// for the stop. It gives up after a minute, leaving the daemons' goroutines
// behind, and says so.
func (g *Gubernator) Close() error {
	time.Sleep(10 * cluster.DaemonAt(0).Config().Behaviors.GlobalSyncWait)
	stopped := make(chan struct{})
	go func() {
		cluster.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		return nil
	case <-time.After(time.Minute):
		return errors.New("contender: Gubernator's daemons did not stop within a minute; left running")
	}
}

// Nodes is the number of daemons.
func (g *Gubernator) Nodes() int { return len(g.daemons) }

// Owner is the index of the daemon that owns name's key.
func (g *Gubernator) Owner(name, key string) (int, error) {
	p, err := cluster.FindOwningPeer(name, key)
	if err != nil {
		return 0, err
	}
	for i, d := range g.daemons {
		if d.PeerInfo.GRPCAddress == p.GRPCAddress {
			return i, nil
		}
	}
	return 0, fmt.Errorf("contender: Gubernator: no daemon at %s", p.GRPCAddress)
}

// GubernatorConfig describes how a Gubernator limit is configured for p.
func GubernatorConfig(p Policy, global bool) string {
	b := "default (BATCHING: forwarded to the key's owner)"
	if global {
		b = "GLOBAL"
	}
	return fmt.Sprintf("RateLimitReq{Algorithm: LEAKY_BUCKET, Limit: %d, Duration: 1000 (ms), Burst: %d, Hits: 1, Behavior: %s}", p.Rate, p.Burst, b)
}

// Node is daemon i as one node of a fleet: each Allow is one request to its
// V1Instance.GetRateLimits, in process (an application calling its
// Gubernator daemon over gRPC pays a loopback round trip more). name
// namespaces the keys, as Env.Prefix does for the others; global sets the
// GLOBAL behaviour. The limit is a leaky bucket, Gubernator's algorithm with
// a burst that refills continuously, as a token bucket of p does.
func (g *Gubernator) Node(i int, name string, p Policy, global bool) Limiter {
	b := gubernator.Behavior_BATCHING
	if global {
		b = gubernator.Behavior_GLOBAL
	}
	return &gubernatorNode{v1: g.daemons[i].V1Server, name: name, behavior: b, p: p}
}

type gubernatorNode struct {
	v1       *gubernator.V1Instance
	name     string
	behavior gubernator.Behavior
	p        Policy
}

func (x *gubernatorNode) Allow(ctx context.Context, key string) (bool, error) {
	// A new request each time: the daemon keeps and changes what it is given.
	r := &gubernator.RateLimitReq{
		Name: x.name, UniqueKey: key, Algorithm: gubernator.Algorithm_LEAKY_BUCKET, Behavior: x.behavior,
		Limit: x.p.Rate, Burst: x.p.Burst, Duration: time.Second.Milliseconds(), Hits: 1,
	}
	resp, err := x.v1.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{r}})
	if err != nil {
		return false, err
	}
	if len(resp.Responses) != 1 || resp.Responses[0] == nil {
		return false, errors.New("contender: Gubernator answered no response")
	}
	if e := resp.Responses[0].Error; e != "" {
		return false, fmt.Errorf("contender: Gubernator: %s", e)
	}
	return resp.Responses[0].Status == gubernator.Status_UNDER_LIMIT, nil
}

// Close does nothing: the daemons belong to the Gubernator.
func (x *gubernatorNode) Close() error { return nil }
