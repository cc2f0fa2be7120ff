package envoyrls_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/rlscompat"
)

// The compatibility suite, over gRPC, in each mode, with response headers
// off (the default) and on under names of the operator's: every answer is
// envoyproxy/ratelimit's, headers included, and every header name of every
// answer is checked (make rls-compat runs the same cases against it).
func TestCompatibility(t *testing.T) {
	srv := redistest.Start(t)
	settings := []struct {
		name    string
		headers envoyrls.Headers
	}{
		{"headers off", envoyrls.Headers{}},
		{"headers on", envoyrls.Headers{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"}},
	}
	for _, mode := range []hybrid.Mode{hybrid.Async, hybrid.Sync, hybrid.LocalOnly} {
		for _, set := range settings {
			t.Run(mode.String()+"/"+set.name, func(t *testing.T) {
				srv.Flush()
				var rdb redis.UniversalClient
				if mode != hybrid.LocalOnly {
					rdb = srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
				}
				r := startRig(t, rdb, hybrid.Config{Mode: mode, Prefix: "compat:" + mode.String() + ":"},
					envoyrls.Config{Rules: static(t, rlscompat.Config), Headers: set.headers})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				results, err := rlscompat.Run(ctx, r.client, rlscompat.Headers(set.headers))
				require.NoError(t, err)
				require.Len(t, results, len(rlscompat.Cases()))
				for _, res := range results {
					assert.NoError(t, res.Err, "%s: %s", res.Case.Name, res.Case.Doc)
				}
			})
		}
	}
}
