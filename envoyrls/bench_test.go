package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/metrics"

	"github.com/prometheus/client_golang/prometheus"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const benchRules = `
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: route
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1000000, algorithm: token_bucket}
`

// The service's own cost per call, without gRPC: finding the rules and
// deciding two descriptors from memory, with metrics.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, mode := range []hybrid.Mode{hybrid.LocalOnly, hybrid.Async} {
		b.Run(mode.String(), func(b *testing.B) {
			var rdb redis.UniversalClient
			if mode == hybrid.Async {
				rdb = redistest.Start(b).Client(b)
			}
			lim, err := hybrid.New(hybrid.Config{Redis: rdb, Mode: mode})
			require.NoError(b, err)
			defer lim.Close(context.Background())
			rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
			require.NoError(b, err)
			rules := static(&testing.T{}, benchRules)
			svc, err := envoyrls.New(envoyrls.Config{Limiter: lim, Rules: rules, Observer: rec})
			require.NoError(b, err)
			reqs := make([]*rlsv3.RateLimitRequest, 1000)
			for i := range reqs {
				reqs[i] = req("bench", 0, "client=c"+strconv.Itoa(i), "route=/api,user=u"+strconv.Itoa(i))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
