package trafficlog

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/accesslog"
)

// A scenario writes the same bytes every time; every line is a Combined
// log line from the load balancer, in time order; the abuser floods only
// in its window, and the crawler and the office come through the proxy.
func TestWrite(t *testing.T) {
	s := Scenario{Start: time.Date(2026, 10, 10, 9, 0, 0, 0, time.UTC), Duration: 5 * time.Minute, Seed: 3,
		Clients: 5, ClientRate: 0.5, Office: 2, AbuseFrom: time.Minute, AbuseFor: time.Minute, AbuseRate: 8, CrawlRate: 2}
	var a, b bytes.Buffer
	n, err := Write(&a, s)
	require.NoError(t, err)
	_, err = Write(&b, s)
	require.NoError(t, err)
	assert.Equal(t, a.Bytes(), b.Bytes())

	r, err := accesslog.NewReader(bytes.NewReader(a.Bytes()), "gen", accesslog.Options{Format: accesslog.Combined})
	require.NoError(t, err)
	var e accesslog.Entry
	var last time.Time
	lines, flood, calm, crawl, office := 0, 0, 0, 0, 0
	for r.Next(&e) {
		lines++
		require.False(t, e.Time.Before(last), "in time order")
		last = e.Time
		assert.Equal(t, LoadBalancer, e.RemoteAddr)
		inFlood := !e.Time.Before(s.Start.Add(s.AbuseFrom)) && e.Time.Before(s.Start.Add(s.AbuseFrom+s.AbuseFor))
		switch {
		case e.ForwardedFor == Abuser && inFlood:
			flood++
		case e.ForwardedFor == Abuser:
			calm++
		case e.ForwardedFor == Crawler+", "+CrawlerProxy:
			crawl++
		case strings.HasSuffix(e.ForwardedFor, ", "+CrawlerProxy):
			office++
		}
	}
	require.NoError(t, r.Err())
	bad, _ := r.Malformed()
	assert.Zero(t, bad)
	assert.Equal(t, n, lines)
	assert.InDelta(t, 8*60, flood, 8*60*0.2, "the flood: 8 a second for a minute")
	assert.InDelta(t, 0.5*240, calm, 0.5*240*0.3, "before and after, the abuser browses as a client does")
	assert.InDelta(t, 2*300, crawl, 2*300*0.2)
	assert.Positive(t, office)
}
