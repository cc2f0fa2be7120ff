package accesslog

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// at is 2026-10-10 13:55:36 at UTC-7, as the logs below write it.
var at = time.Date(2026, 10, 10, 20, 55, 36, 0, time.UTC)

func TestCombined(t *testing.T) {
	cases := []struct {
		name string
		line string
		want Entry
	}{
		{"common", `203.0.113.7 - alice [10/Oct/2026:13:55:36 -0700] "GET /a?b=1 HTTP/1.1" 200 2326`,
			Entry{Method: "GET", Target: "/a?b=1", Status: 200, RemoteAddr: "203.0.113.7", User: "alice"}},
		{"combined", `203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "POST /up HTTP/2.0" 429 - "https://x/" "curl/8.5"`,
			Entry{Method: "POST", Target: "/up", Status: 429, RemoteAddr: "203.0.113.7"}},
		{"nginx main: X-Forwarded-For last", `10.0.0.2 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 12 "-" "Mozilla/5.0 (X11)" "198.51.100.9, 10.0.0.3"`,
			Entry{Method: "GET", Target: "/", Status: 200, RemoteAddr: "10.0.0.2", ForwardedFor: "198.51.100.9, 10.0.0.3"}},
		{"nginx main without a forwarded header", `10.0.0.2 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 12 "-" "-" "-"`,
			Entry{Method: "GET", Target: "/", Status: 200, RemoteAddr: "10.0.0.2"}},
		{"quotes escaped, Apache and nginx", `::1 - - [10/Oct/2026:13:55:36 -0700] "GET /q HTTP/1.1" 404 0 "a\"b" "c\x22d"`,
			Entry{Method: "GET", Target: "/q", Status: 404, RemoteAddr: "::1"}},
		{"unquoted fields after: read no further", `203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET /a HTTP/1.1" 200 5 "-" "ua" 0.004 upstream=1`,
			Entry{Method: "GET", Target: "/a", Status: 200, RemoteAddr: "203.0.113.7"}},
		{"HTTP/0.9 request line", `203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET /old" 200 5`,
			Entry{Method: "GET", Target: "/old", Status: 200, RemoteAddr: "203.0.113.7"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e Entry
			require.NoError(t, parseCombined([]byte(tc.line), &e))
			tc.want.Time, tc.want.Resolution = at, time.Second
			assert.Equal(t, tc.want, e)
		})
	}
}

func TestCombinedMalformed(t *testing.T) {
	for line, reason := range map[string]string{
		`203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "-" 400 0`:                     "request line",
		`203.0.113.7 - - [10/Foo/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 0`:        "time",
		`203.0.113.7 - - 10/Oct/2026:13:55:36 -0700 "GET / HTTP/1.1" 200 0`:          "no [time]",
		`203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" OK 0`:         "status",
		`203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1`:               "unterminated",
		`203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 0 "-" "x`: "unterminated",
		`just some words`: "[time]",
	} {
		var e Entry
		err := parseCombined([]byte(line), &e)
		require.Error(t, err, line)
		assert.Contains(t, err.Error(), reason, line)
	}
}

func TestJSON(t *testing.T) {
	envoy := newJSONFields(EnvoyFields())
	cases := []struct {
		name   string
		fields jsonFields
		line   string
		want   Entry
	}{
		{"envoy", envoy, `{"start_time":"2026-10-10T20:55:36.250Z","method":"GET","path":"/a","response_code":200,"downstream_remote_address":"10.0.0.2:51234","x_forwarded_for":"198.51.100.9"}`,
			Entry{Time: at.Add(250 * time.Millisecond), Resolution: time.Millisecond, Method: "GET", Target: "/a", Status: 200, RemoteAddr: "10.0.0.2:51234", ForwardedFor: "198.51.100.9"}},
		{"envoy without the header", envoy, `{"start_time":"2026-10-10T20:55:36Z","method":"GET","path":"/a","response_code":"503","x_forwarded_for":"-"}`,
			Entry{Time: at, Resolution: time.Second, Method: "GET", Target: "/a", Status: 503}},
		{"nested, a request line, Unix seconds", newJSONFields(Fields{Time: "ts", Request: "http.request", RemoteAddr: "client.ip", User: "auth.user", Tier: "auth.tier", APIKey: "auth.key"}),
			`{"ts":1791665736.5,"http":{"request":"POST /up HTTP/1.1"},"client":{"ip":"203.0.113.7"},"auth":{"user":"u1","tier":"gold","key":"k"}}`,
			Entry{Time: at.Add(500 * time.Millisecond), Resolution: time.Millisecond, Method: "POST", Target: "/up", RemoteAddr: "203.0.113.7", User: "u1", Tier: "gold", APIKey: "k"}},
		{"Unix milliseconds", newJSONFields(Fields{Time: "t", Method: "m", Path: "p"}), `{"t":1791665736250,"m":"GET","p":"/"}`,
			Entry{Time: at.Add(250 * time.Millisecond), Resolution: time.Millisecond, Method: "GET", Target: "/"}},
		{"nginx time_local", newJSONFields(Fields{Time: "t", Method: "m", Path: "p"}), `{"t":"10/Oct/2026:13:55:36 -0700","m":"GET","p":"/"}`,
			Entry{Time: at, Resolution: time.Second, Method: "GET", Target: "/"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e Entry
			require.NoError(t, parseJSON([]byte(tc.line), &tc.fields, &e))
			assert.True(t, tc.want.Time.Equal(e.Time), "time %v, want %v", e.Time, tc.want.Time)
			e.Time = tc.want.Time
			assert.Equal(t, tc.want, e)
		})
	}
	for line, reason := range map[string]string{
		`not json`:                    "not a JSON object",
		`{"method":"GET","path":"/"}`: "no time field",
		`{"start_time":"yesterday","method":"GET","path":"/"}`:                                 "time field",
		`{"start_time":"2026-10-10T20:55:36Z","path":"/"}`:                                     "no method and path",
		`{"start_time":"2026-10-10T20:55:36Z","method":"GET","path":"/","response_code":"ok"}`: "status",
		`{"start_time":"2026-10-10T20:55:36Z","method":"GET","path":"/"} {}`:                   "after top-level value",
		`[1, 2]`: "a JSON value of another kind",
	} {
		var e Entry
		err := parseJSON([]byte(line), &envoy, &e)
		require.Error(t, err, line)
		assert.Contains(t, err.Error(), reason, line)
	}
}

func TestParseFields(t *testing.T) {
	f, err := ParseFields("time=ts, path=req.path, user=", EnvoyFields())
	require.NoError(t, err)
	assert.Equal(t, "ts", f.Time)
	assert.Equal(t, "req.path", f.Path)
	assert.Equal(t, "method", f.Method)
	_, err = ParseFields("when=ts", EnvoyFields())
	assert.ErrorContains(t, err, "unknown name")
	_, err = ParseFields("time=", EnvoyFields())
	assert.ErrorContains(t, err, "required")
}

// readAll reads a log whole.
func readAll(t *testing.T, r *Reader) []Entry {
	t.Helper()
	var out []Entry
	var e Entry
	for r.Next(&e) {
		out = append(out, e)
	}
	require.NoError(t, r.Err())
	return out
}

const clfLines = `203.0.113.7 - - [10/Oct/2026:13:55:36 -0700] "GET /1 HTTP/1.1" 200 5

203.0.113.7 - - [10/Oct/2026:13:55:37 -0700] "-" 400 0
203.0.113.7 - - [10/Oct/2026:13:55:38 -0700] "GET /2 HTTP/1.1" 200 5
`

// A log is read plain or gzip-compressed alike, whatever its name; blank
// lines are skipped and malformed ones counted with their line numbers,
// and neither stops the reading.
func TestReaderPlainAndGzip(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "access.log")
	require.NoError(t, os.WriteFile(plain, []byte(clfLines), 0o644))
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write([]byte(clfLines))
	require.NoError(t, zw.Close())
	zipped := filepath.Join(dir, "access.log.1") // no .gz: the bytes tell
	require.NoError(t, os.WriteFile(zipped, z.Bytes(), 0o644))
	for _, name := range []string{plain, zipped} {
		r, err := Open(name, Options{})
		require.NoError(t, err)
		entries := readAll(t, r)
		require.NoError(t, r.Close())
		require.Len(t, entries, 2, name)
		assert.Equal(t, "/2", entries[1].Target)
		n, ex := r.Malformed()
		assert.Equal(t, 1, n)
		require.Len(t, ex, 1)
		assert.Equal(t, 3, ex[0].Line)
		assert.Equal(t, name, ex[0].File)
		assert.Contains(t, ex[0].String(), name+":3: request line")
		assert.Equal(t, 4, r.Lines())
		assert.Positive(t, r.BytesRead())
	}
}

// Lines longer than MaxLine are malformed, and the next line is read.
func TestReaderLongLine(t *testing.T) {
	long := strings.Repeat("x", MaxLine+10)
	src := long + "\n" + strings.SplitN(clfLines, "\n", 2)[0] + "\n" + long
	r, err := NewReader(strings.NewReader(src), "long.log", Options{Format: Combined})
	require.NoError(t, err)
	entries := readAll(t, r)
	assert.Len(t, entries, 1)
	n, ex := r.Malformed()
	assert.Equal(t, 2, n)
	assert.Contains(t, ex[0].Reason, "longer than")
	assert.Equal(t, 3, ex[1].Line)
}

// A file that cannot be opened, a directory, and a gzip stream cut short
// are errors that name the file.
func TestReaderUnreadable(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "missing.log"), Options{})
	assert.ErrorContains(t, err, "missing.log")
	_, err = Open(dir, Options{})
	assert.ErrorContains(t, err, "is a directory")

	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write([]byte(strings.Repeat(strings.SplitN(clfLines, "\n", 2)[0]+"\n", 2000)))
	require.NoError(t, zw.Close())
	cut := filepath.Join(dir, "cut.log.gz")
	require.NoError(t, os.WriteFile(cut, z.Bytes()[:z.Len()/2], 0o644))
	r, err := Open(cut, Options{})
	require.NoError(t, err)
	var e Entry
	for r.Next(&e) {
	}
	require.Error(t, r.Err())
	assert.Contains(t, r.Err().Error(), "cut.log.gz")
	assert.Contains(t, r.Err().Error(), "unexpected EOF")
}

// Auto tells JSON lines from the Combined format by the first line.
func TestReaderAuto(t *testing.T) {
	src := `{"start_time":"2026-10-10T20:55:36Z","method":"GET","path":"/j"}` + "\n"
	r, err := NewReader(strings.NewReader(src), "j.log", Options{})
	require.NoError(t, err)
	entries := readAll(t, r)
	require.Len(t, entries, 1)
	assert.Equal(t, "/j", entries[0].Target)
}

// Merge interleaves logs by time, the log given first winning ties.
func TestMerge(t *testing.T) {
	a := `203.0.113.1 - - [10/Oct/2026:13:55:36 -0700] "GET /a1 HTTP/1.1" 200 5
203.0.113.1 - - [10/Oct/2026:13:55:38 -0700] "GET /a2 HTTP/1.1" 200 5
`
	b := `203.0.113.2 - - [10/Oct/2026:13:55:36 -0700] "GET /b1 HTTP/1.1" 200 5
203.0.113.2 - - [10/Oct/2026:13:55:37 -0700] "GET /b2 HTTP/1.1" 200 5
203.0.113.2 - - [10/Oct/2026:13:55:39 -0700] "GET /b3 HTTP/1.1" 200 5
`
	ra, err := NewReader(strings.NewReader(a), "a", Options{})
	require.NoError(t, err)
	rb, err := NewReader(strings.NewReader(b), "b", Options{})
	require.NoError(t, err)
	m := NewMerge(ra, rb)
	var got []string
	var e Entry
	for m.Next(&e) {
		got = append(got, e.Target)
	}
	require.NoError(t, m.Err())
	assert.Equal(t, []string{"/a1", "/b1", "/b2", "/a2", "/b3"}, got)
}
