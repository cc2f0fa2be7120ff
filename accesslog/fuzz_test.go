package accesslog

import (
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
	f.Add(`x - - [10/Oct/2026:13:55:36 -0700] "\`)
	fields := newJSONFields(EnvoyFields())
	f.Fuzz(func(t *testing.T, line string) {
		var e Entry
		if parseCombined([]byte(line), &e) == nil && (e.Method == "" || e.Target == "") {
			t.Fatalf("combined %q: read without a method or target: %+v", line, e)
		}
		if parseJSON([]byte(line), &fields, &e) == nil && (e.Method == "" || e.Target == "") {
			t.Fatalf("json %q: read without a method or target: %+v", line, e)
		}
	})
}
