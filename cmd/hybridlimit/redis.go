package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	_ "github.com/Shopify/toxiproxy/v2/toxics" // registers the toxics
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// backend is the Redis a command runs its nodes against, and a way to take
// it away and bring it back.
type backend struct {
	// addr is where the nodes connect ("" for local only).
	addr string
	// what says, in a line, which Redis this is.
	what string
	// down makes Redis unreachable for the nodes; up brings it back.
	down, up func() error
	// server is the redis-server this program started, if it did.
	server *redisproc.Server
	close  func()
}

// newBackend picks the Redis for a run: addr (a Redis the user runs) through
// an in-process TCP proxy this program can cut, so the user's Redis is never
// touched; else a private redis-server this program starts, kills and
// restarts; else none, and the run is local only with a notice on out.
func newBackend(addr string, out io.Writer) (*backend, error) {
	if addr != "" {
		server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		p := toxiproxy.NewProxy(server, "redis", "127.0.0.1:0", addr)
		if err := p.Start(); err != nil {
			return nil, fmt.Errorf("proxy to %s: %w", addr, err)
		}
		return &backend{
			addr:  p.Listen,
			what:  fmt.Sprintf("your Redis at %s, through a proxy this demo cuts to show an outage (your Redis is not touched)", addr),
			down:  func() error { p.Stop(); return nil },
			up:    p.Start,
			close: p.Stop,
		}, nil
	}
	srv, err := redisproc.Start()
	if err != nil {
		fmt.Fprintf(out, "notice: %v: running local only, each node on its own.\n", err)
		return &backend{what: "none: local only", down: func() error { return nil }, up: func() error { return nil }, close: func() {}}, nil
	}
	return &backend{
		addr:   srv.Addr(),
		what:   fmt.Sprintf("a private redis-server at %s, started for this run", srv.Addr()),
		down:   func() error { srv.Kill(); return nil },
		up:     srv.Restart,
		server: srv,
		close:  func() { _ = srv.Close() },
	}, nil
}

// client returns a client of the backend with timeouts fit for a demo of
// failures: short, no retries.
func (b *backend) client() redis.UniversalClient {
	if b.addr == "" {
		return nil
	}
	const short = 200 * time.Millisecond
	return redis.NewClient(&redis.Options{
		Addr: b.addr, MaxRetries: -1, DialTimeout: short, ReadTimeout: short, WriteTimeout: short, PoolTimeout: short,
	})
}

// envRedis is the Redis the environment names: REDIS_ADDR, for every
// command (rls also reads envoyproxy/ratelimit's REDIS_URL).
func envRedis() string { return os.Getenv("REDIS_ADDR") }

// redisUsage describes -redis for the commands that run nodes of their own
// (demo and tune).
const redisUsage = "a Redis to use, host:port (default $REDIS_ADDR; else a private redis-server this command starts and stops)"
