package envoyrls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// check is a request of one descriptor with its own hits_addend (0: a
// check that adds nothing).
func check(domain string, hits uint64, k, v string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries:    []*commonv3.RateLimitDescriptor_Entry{{Key: k, Value: v}},
		HitsAddend: wrapperspb.UInt64(hits),
	}}}
}

// Two replicas in Sync mode (the limiter exact, in Redis), whose counts
// lag each other by a sync interval, as docs/envoy.md allows. Replica A
// admits 8 of a 10 an hour rule; replica B, which has not heard A's hits
// yet, is asked for 5: the limiter (exact) refuses it, and
// envoyproxy/ratelimit's counter is then 13, past the limit: every later
// call of the window is over, lighter ones included, and so is a check of
// zero hits ("a client over the limit stays over it until the window
// ends, even with lighter requests", docs/envoy.md). A denial the
// replica's own count (5) holds is taken for the limiter's alone only in
// Async mode; here it once spent and marked nothing, and the next call of
// 1 was admitted.
func TestAnExactDenialEndsTheWindowWhateverTheLaggingCountSays(t *testing.T) {
	srv := redistest.Start(t)
	rules := static(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	if time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)) < 10*time.Second {
		time.Sleep(11 * time.Second) // not across an hour's end
	}
	var rigs []*rig
	for i := range 2 {
		rdb := srv.Client(t, func(*redis.Options) {})
		rigs = append(rigs, startRig(t, rdb,
			hybrid.Config{Mode: hybrid.Sync, Node: fmt.Sprint("s", i), Prefix: "lag:"},
			// The counts' interval long enough that A's hits are not sent
			// within the test: the lag one interval gives, made certain.
			envoyrls.Config{Rules: rules, Redis: rdb, Prefix: "lag:", SyncInterval: time.Minute}))
	}
	a, b := rigs[0], rigs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 8 {
		resp, err := a.client.ShouldRateLimit(ctx, req("d", 1, "k=x"))
		require.NoError(t, err)
		require.Equal(t, okCode, resp.GetOverallCode(), "A's call %d: within the limit", i)
	}
	resp, err := b.client.ShouldRateLimit(ctx, req("d", 5, "k=x"))
	require.NoError(t, err)
	require.Equal(t, overCode, resp.GetOverallCode(), "8+5 > 10: over")

	// envoyproxy/ratelimit: counter 13, then 13 for a check, then 14.
	resp, err = b.client.ShouldRateLimit(ctx, check("d", 0, "k", "x"))
	require.NoError(t, err)
	assert.Equal(t, overCode, resp.GetOverallCode(), "B: a check of zero hits after the counter went past the limit")
	resp, err = a.client.ShouldRateLimit(ctx, check("d", 0, "k", "x"))
	require.NoError(t, err)
	assert.Equal(t, overCode, resp.GetOverallCode(), "A: a check of zero hits after the counter went past the limit")
	resp, err = b.client.ShouldRateLimit(ctx, req("d", 1, "k=x"))
	require.NoError(t, err)
	assert.Equal(t, overCode, resp.GetOverallCode(), "B: a lighter call after the counter went past the limit")
}
