package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
)

// fleet is several limiter nodes in one process, each with its own Redis
// client, as separate service instances would be.
type fleet struct {
	nodes   []*hybrid.Limiter
	clients []redis.UniversalClient
}

// startFleet makes n nodes configured by cfg against the backend.
func startFleet(n int, be *backend, cfg hybrid.Config) (*fleet, error) {
	f := &fleet{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) // the table tells the story
	if be.server != nil && cfg.StartupTimeout == 0 {
		// The redis-server this run started is up and local: only a starved
		// machine slows the first contact (make test, its packages run
		// beside each other, took more than the default 2 s for the demo and
		// for tune).
		cfg.StartupTimeout = 10 * time.Second
	}
	redis.SetLogger(quiet{})
	for i := range n {
		c := be.client()
		node := cfg
		node.Redis = c
		node.Node = fmt.Sprintf("node-%d", i+1)
		l, err := hybrid.New(node)
		if err != nil {
			if c != nil {
				_ = c.Close()
			}
			f.close()
			return nil, err
		}
		f.nodes = append(f.nodes, l)
		if c != nil {
			f.clients = append(f.clients, c)
		}
	}
	return f, nil
}

func (f *fleet) deciders() []fleetsim.Decider {
	d := make([]fleetsim.Decider, len(f.nodes))
	for i, n := range f.nodes {
		d[i] = n
	}
	return d
}

// degraded counts the nodes deciding under their fallback.
func (f *fleet) degraded() int {
	n := 0
	for _, l := range f.nodes {
		if l.Degraded() {
			n++
		}
	}
	return n
}

func (f *fleet) mode() hybrid.Mode { return f.nodes[0].Mode() }

// close flushes every node and closes its client.
func (f *fleet) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, l := range f.nodes {
		_ = l.Close(ctx)
	}
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// quiet keeps go-redis from logging every dial an outage fails.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
