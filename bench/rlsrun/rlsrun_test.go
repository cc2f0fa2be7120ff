package rlsrun

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteConfigAndFindBins(t *testing.T) {
	root := t.TempDir()
	if err := WriteConfig(root, map[string]string{"a.yaml": "domain: a\n"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "ratelimit", "config", "a.yaml"))
	if err != nil || string(data) != "domain: a\n" {
		t.Fatalf("got %q, %v", data, err)
	}
	_, err = FindBins(t.TempDir(), true)
	if err == nil || !strings.Contains(err.Error(), "run make rls-peer") {
		t.Fatalf("want how to build the binaries, got %v", err)
	}
	if !strings.HasPrefix(Version, "v") || strings.ContainsAny(Version, " \n") {
		t.Fatalf("version %q", Version)
	}
}

func TestMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# HELP x\nrate_limit_sync_round_duration_seconds_sum{result=\"ok\"} 0.5\nrate_limit_sync_round_duration_seconds_sum{result=\"error\"} 9\nrate_limit_sync_round_duration_seconds_count{result=\"ok\"} 100\n"))
	}))
	defer srv.Close()
	in := &Instance{Admin: strings.TrimPrefix(srv.URL, "http://")}
	v, err := in.Metric(context.Background(), `rate_limit_sync_round_duration_seconds_sum{result="ok"}`)
	if err != nil || v != 0.5 {
		t.Fatalf("got %v, %v", v, err)
	}
	if _, err := in.Metric(context.Background(), "missing"); err == nil {
		t.Fatal("a missing series is an error")
	}
}

// ReadProc reads this test's own process: CPU time grows with work, and the
// resident set is at most its peak.
func TestReadProc(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		x++
	}
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.CPU <= before.CPU || after.RSS <= 0 || after.RSS > after.HWM {
		t.Fatalf("before %+v, after %+v (%d loops)", before, after, x)
	}
	if _, err := ReadProc(-1); err == nil {
		t.Fatal("no such process: an error")
	}
}
