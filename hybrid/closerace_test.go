package hybrid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// Sync's report buffers are never shared with a call the breaker abandoned
// at its timeout: with Redis's replies held past every timeout, rounds
// abandon their batches while the calls still run and read them (and write
// their answers), decisions time out by the hundred, and Close runs its
// last rounds meanwhile. Run under -race; Close returns by its deadline.
func TestSyncCloseWithAbandonedCalls(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := faultproxy.Start(t, srv.Addr())
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second,
				ContextTimeoutEnabled: ctxTimeout})
			t.Cleanup(func() { _ = c.Close() })
			l, err := New(Config{Redis: c, Mode: Sync, RedisTimeout: 20 * time.Millisecond, SyncInterval: 10 * time.Millisecond,
				BreakerFailures: 1 << 30, FleetSize: 1, MaxReports: 50})
			require.NoError(t, err)
			lim := Per(1_000_000, time.Hour).WithAlgorithm(FixedWindow)
			for i := range 100 {
				_, err := l.Allow(bg, fmt.Sprint("k", i), lim)
				require.NoError(t, err)
			}
			// Every reply now comes 300 ms late: past a decision's 20 ms and
			// a round's 250 ms batch timeout.
			proxy.ReplyLatency(t, 300*time.Millisecond)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := l.Allow(bg, fmt.Sprint("k", (i*4+g)%100), lim)
						if errors.Is(err, ErrClosed) {
							return
						}
						assert.NoError(t, err)
					}
				}()
			}
			time.Sleep(time.Second) // rounds abandon batches on calls that still run
			ctx, cancel := context.WithTimeout(bg, 600*time.Millisecond)
			defer cancel()
			began := time.Now()
			err = l.Close(ctx)
			took := time.Since(began)
			close(stop)
			wg.Wait()
			t.Logf("Close took %v: %v; reconcile %+v", took, err, l.Stats().Reconcile)
			assert.Less(t, took, 5*time.Second, "a hang guard: Close has a 600 ms context")
			// The abandoned calls' replies arrive now, into their own buffers.
			proxy.Clear()
			time.Sleep(700 * time.Millisecond)
		})
	}
}
