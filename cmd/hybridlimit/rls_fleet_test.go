package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The replicas' tests count 10 a day, as the sequences envoyproxy/ratelimit
// is compared with on a 10 a minute rule: a day's window is not crossed
// while a test runs (a minute's would be, now and then).
const tenADay = `
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: %d}
`

func tenADayConfig(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	writeRule(t, dir, n)
	return dir
}

func writeRule(t *testing.T, dir string, n int) {
	t.Helper()
	tmp := filepath.Join(dir, ".edge.yaml")
	require.NoError(t, os.WriteFile(tmp, []byte(fmt.Sprintf(tenADay, n)), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "edge.yaml")))
}

// readWait is how long the replicas' first call for a key waits to read
// the fleet's count: long enough for a loaded machine, where the default
// 5 ms passes before Redis answers (the call then goes on with what the
// replica knows, and its remaining is higher than the fleet's).
const readWait = "2s"

// hit sends one call for client c and returns the answer's code and
// limit_remaining, and its remaining header.
func hit(t *testing.T, r *rlsRun, c string) (rlsv3.RateLimitResponse_Code, uint32, string) {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: c}}}}}
	resp, err := rlsv3.NewRateLimitServiceClient(r.client(t)).ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	header := ""
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == "RateLimit-Remaining" {
			header = h.GetValue()
		}
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining(), header
}

// countKey is envoyproxy/ratelimit's Redis key of client c's count today
// under prefix, on srv's clock.
func countKey(t *testing.T, srv *redistest.Server, prefix, c string) string {
	t.Helper()
	v, err := srv.Do("TIME")
	require.NoError(t, err)
	secs, err := strconv.ParseInt(v.([]any)[0].(string), 10, 64)
	require.NoError(t, err)
	return prefix + "edge_client_" + c + "_" + strconv.FormatInt(secs/86400*86400, 10)
}

// waitCount waits until Redis holds n for key: what the replicas sent.
func waitCount(t *testing.T, srv *redistest.Server, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := srv.Do("GET", key)
		return err == nil && v == strconv.Itoa(n)
	}, 20*time.Second, 5*time.Millisecond, "Redis holds %d under %s", n, key)
}

// Two replicas, a 10 a day rule: the first hit answers 9 remaining, as
// envoyproxy/ratelimit does (the limit minus the fleet's count), not the
// replica's share; after 3 hits on the first replica, sent to Redis, the
// second answers 6, in limit_remaining and in the header alike.
func TestRLSReplicasRemainingIsTheFleets(t *testing.T) {
	srv := redistest.Start(t)
	dir := tenADayConfig(t, 10)
	args := []string{"-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-redis", srv.Addr(), "-prefix", "t:", "-count-read-wait", readWait, "-response-headers"}
	a, b := startRLS(t, args...), startRLS(t, args...)

	var got []uint32
	for range 3 {
		code, rem, header := hit(t, a, "c1")
		assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
		assert.Equal(t, strconv.Itoa(int(rem)), header)
		got = append(got, rem)
	}
	assert.Equal(t, []uint32{9, 8, 7}, got, "replica 1")
	waitCount(t, srv, countKey(t, srv, "t:", "c1"), 3)
	code, rem, header := hit(t, b, "c1")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(6), rem, "replica 2 after 3 hits on replica 1")
	assert.Equal(t, "6", header)
	// Replica 1 has not heard of it: its count is as of its last call.
	// That call was sent with the next interval's pipeline, whose answer
	// carried the fleet's count: a check (no hits) then sees 5 used.
	waitCount(t, srv, countKey(t, srv, "t:", "c1"), 4)
	_, rem, _ = hit(t, a, "c1")
	assert.Equal(t, uint32(6), rem, "replica 1 after a hit on replica 2 it has not heard of")
	require.Eventually(t, func() bool { return check(t, a, "c1") == 5 }, 20*time.Second, 5*time.Millisecond,
		"replica 1 learns the fleet's count with its next interval")
}

// check sends a call of no hits for client c and returns limit_remaining.
func check(t *testing.T, r *rlsRun, c string) uint32 {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries:    []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: c}},
		HitsAddend: wrapperspb.UInt64(0)}}}
	resp, err := rlsv3.NewRateLimitServiceClient(r.client(t)).ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	return resp.GetStatuses()[0].GetLimitRemaining()
}

// One replica, 3 hits on a 10 a day rule, stopped (SIGTERM's path) and
// started again on the same Redis: the 4th hit answers 6 remaining, as
// envoyproxy/ratelimit's does, and the window admits 10 in all, not 10
// more.
func TestRLSRestartedReplicaKeepsTheWindow(t *testing.T) {
	srv := redistest.Start(t)
	dir := tenADayConfig(t, 10)
	args := []string{"-grpc", "127.0.0.1:0", "-admin", "", "-config", dir, "-redis", srv.Addr(), "-prefix", "t:", "-count-read-wait", readWait}
	r := startRLS(t, args...)
	for range 3 {
		code, _, _ := hit(t, r, "c1")
		require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	}
	require.NoError(t, r.stop())

	r = startRLS(t, args...)
	code, rem, _ := hit(t, r, "c1")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(6), rem, "the 4th hit, after the restart")
	admitted := 4
	for range 10 {
		if code, _, _ := hit(t, r, "c1"); code == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "the window admits its limit across the restart, no more")
	require.NoError(t, r.stop())
}

// A reload that raises a limit (10 to 20 a day) after 2 hits keeps them:
// the 3rd hit answers 17 remaining, as envoyproxy/ratelimit's does, and
// the window admits 20 in all.
func TestRLSReloadKeepsTheCount(t *testing.T) {
	srv := redistest.Start(t)
	dir := tenADayConfig(t, 10)
	r := startRLS(t, "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", dir, "-redis", srv.Addr(), "-prefix", "t:", "-count-read-wait", readWait)
	for range 2 {
		code, _, _ := hit(t, r, "c1")
		require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	}
	writeRule(t, dir, 20)
	require.Eventually(t, func() bool {
		_, body := r.get(t, "/metrics")
		return strings.Contains(body, `rate_limit_config_reloads_total{result="ok"} 1`)
	}, 20*time.Second, 10*time.Millisecond, "the new limit is loaded")
	code, rem, _ := hit(t, r, "c1")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(17), rem, "the 3rd hit, after the limit went from 10 to 20")
	admitted := 3
	for range 20 {
		if code, _, _ := hit(t, r, "c1"); code == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	assert.Equal(t, 20, admitted, "the window admits the new limit in all, not the new limit more")
	require.NoError(t, r.stop())
}
