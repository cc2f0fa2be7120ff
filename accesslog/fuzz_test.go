package accesslog

import (
	"encoding/json"
	"strings"
	"testing"
)

// The fuzz tests run their seeds in every `go test`; to search further:
//
//	go test -run '^$' -fuzz '^FuzzLine$' -fuzztime 30s ./accesslog/
//
// A line of any bytes, in either format, is read or malformed: never a
// panic, and a line read has a method and a target.
func FuzzLine(f *testing.F) {
	for _, seed := range strings.Split(clfLines, "\n") {
		f.Add(seed)
	}
	f.Add(`::1 - - [10/Oct/2026:13:55:36 -0700] "GET /q HTTP/1.1" 404 0 "a\"b" "c\x22d" "1.2.3.4"`)
	f.Add(`{"start_time":"2026-10-10T20:55:36.250Z","method":"GET","path":"/a","response_code":200}`)
	f.Add(`{"start_time":1e300,"method":"GET","path":"/a"}`)
	f.Add(`{"x":{"method":"POST"},"start_time":"2026-10-10T20:55:36Z","method":"G\u0045T","path":"/a\"b","y":[{"path":"/no"}]}`)
	f.Add(` {"start_time":"2026-10-10T20:55:36Z", "method" : "GET" , "path":"/" , "method":"PUT"} `)
	f.Add(`x - - [10/Oct/2026:13:55:36 -0700] "\`)
	fields := newJSONFields(EnvoyFields())
	f.Fuzz(func(t *testing.T, line string) {
		var e Entry
		if parseCombined([]byte(line), &e) == nil && (e.Method == "" || e.Target == "") {
			t.Fatalf("combined %q: read without a method or target: %+v", line, e)
		}
		if parseJSON([]byte(line), &fields, &e) == nil {
			if e.Method == "" || e.Target == "" {
				t.Fatalf("json %q: read without a method or target: %+v", line, e)
			}
			// The scanner reads what encoding/json decodes.
			var obj map[string]any
			if err := json.Unmarshal([]byte(line), &obj); err != nil {
				t.Fatalf("json %q: read, but encoding/json says %v", line, err)
			}
			if m, ok := obj["method"].(string); ok && m != "" && obj["path"] != nil && m != e.Method {
				t.Fatalf("json %q: method %q, encoding/json's %q", line, e.Method, m)
			}
			if p, ok := obj["path"].(string); ok && p != "" && obj["method"] != nil && p != e.Target {
				t.Fatalf("json %q: path %q, encoding/json's %q", line, e.Target, p)
			}
		}
	})
}
