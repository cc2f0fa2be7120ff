package accesslog

import "testing"

const benchCombined = `10.0.0.2 - - [10/Oct/2026:09:00:00 +0000] "GET /api/v1/search?q=shoes HTTP/1.1" 200 6352 "-" "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148" "192.0.2.13"`

const benchJSON = `{"start_time":"2026-10-10T09:00:00.250Z","method":"GET","path":"/api/v1/search?q=shoes","protocol":"HTTP/1.1","response_code":200,"response_flags":"-","bytes_received":0,"bytes_sent":6352,"duration":3,"upstream_service_time":"2","x_forwarded_for":"192.0.2.13","user_agent":"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148","request_id":"6f1c2e2a-4b1d-4c55-9a51-9d1a3c1f7e11","authority":"shop.example.com","upstream_host":"10.0.1.7:8080","downstream_remote_address":"10.0.0.2:51234"}`

// BenchmarkParse is one line of each format, as Envoy and nginx write
// them (Envoy's with the fields of Istio's default JSON log).
func BenchmarkParse(b *testing.B) {
	b.Run("combined", func(b *testing.B) {
		b.ReportAllocs()
		var e Entry
		for b.Loop() {
			if err := parseCombined([]byte(benchCombined), &e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		f := newJSONFields(EnvoyFields())
		var e Entry
		for b.Loop() {
			if err := parseJSON([]byte(benchJSON), &f, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
