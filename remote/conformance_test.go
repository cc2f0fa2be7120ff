package remote

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/conformance"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// redisBackend decides on Redis, on Redis's clock: the same host's clock, so
// the test can align to windows with time.Now.
type redisBackend struct{ s *Store }

func (b redisBackend) AllowN(ctx context.Context, key string, lim limit.Limit, n int64) (limit.Result, error) {
	d, err := b.s.AllowN(ctx, key, lim, n)
	return d.Result, err
}
func (redisBackend) Now() time.Time       { return time.Now() }
func (redisBackend) Wait(d time.Duration) { time.Sleep(d) }

// Slack covers the difference between the test's reading of the clock and
// Redis's TIME inside a script: the same host's clock, a round trip apart.
func (redisBackend) Slack() time.Duration { return 10 * time.Millisecond }

func newStore(t *testing.T, c redis.UniversalClient) *Store {
	t.Helper()
	s, err := New(c, Options{Prefix: "conf:"})
	require.NoError(t, err)
	return s
}

func TestConformanceSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	conformance.Run(t, true, func(t *testing.T) conformance.Backend { return redisBackend{newStore(t, c)} })
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	conformance.Run(t, true, func(t *testing.T) conformance.Backend { return redisBackend{newStore(t, c)} })
}
