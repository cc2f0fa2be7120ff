package hybrid

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentListener accepts connections and never answers: a Redis address
// behind a black hole (a hung process, a proxy that lost its upstream). It
// holds every connection until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// New returns by StartupTimeout whatever client it is given: go-redis's
// default options apply no context deadline to the socket
// (ContextTimeoutEnabled is off) and wait up to ReadTimeout (3 s) for each
// of four tries, so New must not wait on the client's own timeouts.
func TestNewReturnsByStartupTimeoutWithADefaultClient(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: silentListener(t)}) // go-redis's defaults
			t.Cleanup(func() { _ = c.Close() })
			const startup = 300 * time.Millisecond
			type result struct {
				l   *Limiter
				err error
			}
			ch := make(chan result, 1)
			began := time.Now()
			go func() {
				l, err := New(Config{Redis: c, Mode: mode, StartupTimeout: startup})
				ch <- result{l, err}
			}()
			select {
			case r := <-ch:
				took := time.Since(began)
				if r.l != nil {
					_ = r.l.Close(bg)
				}
				require.Error(t, r.err, "a Redis that never answers")
				assert.True(t, errors.Is(r.err, ErrRedisUnavailable), "the error says Redis is unavailable: %v", r.err)
				assert.Contains(t, r.err.Error(), "startup timeout", "and that it did not answer within StartupTimeout")
				t.Logf("New returned after %v (StartupTimeout %v): %v", took, startup, r.err)
			case <-time.After(10 * startup): // a hang guard only
				t.Fatalf("New still waiting %v after it began, StartupTimeout %v: it waits on the client's own timeouts", 10*startup, startup)
			}
		})
	}
}
