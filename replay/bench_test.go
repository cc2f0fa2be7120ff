package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/accesslog"
	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/internal/trafficlog"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/rules"
)

// benchRules are docs/examples/rules.yaml's.
const benchRules = `rate_limits:
  global: {requests: 300, window: 1}
  per_ip: {requests: 120, window: 60}
  endpoints:
    /api/v1/search: {requests: 30, window: 60, burst: 10}
    "POST /api/v1/orders": {requests: 10, window: 60}
    /api/v1/items/*: {requests: 60, window: 60, shadow: true}
  default: {requests: 300, window: 60}
`

// benchLogs are twenty minutes of the example's traffic with 150
// well-behaved clients (about 95,000 lines), as a Combined log, gzipped,
// and as Envoy's JSON; made once.
var benchLogs = sync.OnceValue(func() map[string][]byte {
	var plain bytes.Buffer
	_, err := trafficlog.Write(&plain, trafficlog.Scenario{Start: time.Date(2026, 10, 10, 9, 0, 0, 0, time.UTC), Duration: 20 * time.Minute,
		Seed: 1, Clients: 150, ClientRate: 0.5, Office: 2, AbuseFrom: 5 * time.Minute, AbuseFor: 3 * time.Minute, AbuseRate: 6, CrawlRate: 2.5})
	if err != nil {
		panic(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(plain.Bytes())
	_ = zw.Close()
	var js bytes.Buffer
	r, _ := accesslog.NewReader(bytes.NewReader(plain.Bytes()), "plain", accesslog.Options{Format: accesslog.Combined})
	var e accesslog.Entry
	enc := json.NewEncoder(&js)
	for r.Next(&e) {
		_ = enc.Encode(map[string]any{"start_time": e.Time.Format(time.RFC3339Nano), "method": e.Method, "path": e.Target,
			"response_code": e.Status, "downstream_remote_address": e.RemoteAddr + ":443", "x_forwarded_for": e.ForwardedFor,
			"protocol": "HTTP/1.1", "user_agent": "bench"})
	}
	return map[string][]byte{"combined": plain.Bytes(), "combined.gz": z.Bytes(), "json": js.Bytes()}
})

// BenchmarkReplay replays the log whole per iteration, as `hybridlimit
// replay` does (read, parse, merge, the middleware and the limiter on the
// log's clock), and reports the lines replayed a minute of wall time (the
// target is 1,000,000 on 2 cores), and a minute of the CPU time the process
// used, which a loaded machine moves less. compare replays through two
// rules files at once.
func BenchmarkReplay(b *testing.B) {
	logs := benchLogs()
	cfg, err := rules.Parse([]byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rules.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ip := httpkey.IPResolver{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httpkey.XForwardedForOnly}
	for _, tc := range []struct {
		name, log string
		runs      int
	}{{"combined", "combined", 1}, {"combined.gz", "combined.gz", 1}, {"json", "json", 1}, {"compare", "combined", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(logs[tc.log])))
			lines, cpu0 := 0, cpuTime()
			for b.Loop() {
				c := Config{Middleware: middleware.Config{IP: ip, Client: httpkey.IP(ip)}}
				for range tc.runs {
					c.Rules = append(c.Rules, Rules{Name: "rules.yaml", Rules: rs})
				}
				lines += replayBytes(b, c, logs[tc.log])
			}
			b.ReportMetric(float64(lines)/b.Elapsed().Minutes(), "lines/min")
			if cpu := cpuTime() - cpu0; cpu > 0 {
				// The machine's load aside: lines per minute of CPU the
				// process used, the garbage collector's included.
				b.ReportMetric(float64(lines)/cpu.Minutes(), "lines/cpu-min")
			}
		})
	}
}

// replayBytes replays the log in data, returning its lines.
func replayBytes(b *testing.B, cfg Config, data []byte) int {
	r, err := accesslog.NewReader(bytes.NewReader(data), "bench", accesslog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rp, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	m := accesslog.NewMerge(r)
	var e accesslog.Entry
	for m.Next(&e) {
		if err := rp.Add(e); err != nil {
			b.Fatal(err)
		}
	}
	rep, err := rp.Finish()
	if err != nil || m.Err() != nil || rep.Requests < 90_000 || !strings.Contains(rep.Runs[0].Name, "rules") {
		b.Fatalf("replayed %d requests: %v %v", rep.Requests, err, m.Err())
	}
	if n, _ := r.Malformed(); n > 0 {
		b.Fatalf("%d malformed lines", n)
	}
	return r.Lines()
}
