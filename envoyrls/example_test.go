package envoyrls_test

import (
	"context"
	"fmt"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// The service decides in memory; here without Redis (local mode). A real
// deployment serves it with NewServer, and gives the limiter a Redis.
func Example() {
	cfg, err := config.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	lim, err := hybrid.New(hybrid.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close(context.Background())
	svc, err := envoyrls.New(envoyrls.Config{Limiter: lim, Rules: func() *config.Config { return cfg }})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), "remaining", st.GetLimitRemaining())
	}
	// Output:
	// OK 2 HOUR remaining 1
	// OK 2 HOUR remaining 0
	// OVER_LIMIT 2 HOUR remaining 0
}
