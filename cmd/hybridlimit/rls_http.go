package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
)

// httpListeners are the rls command's HTTP listeners (admin, debug),
// served until shutdown.
type httpListeners []*http.Server

// serve listens on addr and serves h there in the background, returning
// the listener's base URL; an empty addr serves nothing and returns
// "none".
func (l *httpListeners) serve(name, addr string, h http.Handler) (string, error) {
	if addr == "" {
		return "none", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("rls: %s listener: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	*l = append(*l, srv)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// shutdown stops every listener, letting requests in flight finish for
// up to 2 seconds (a CPU profile being taken is cut off then).
func (l httpListeners) shutdown() {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range l {
		if srv.Shutdown(c) != nil {
			_ = srv.Close()
		}
	}
}

// debugEndpoints are what the debug listener serves, with what each is.
var debugEndpoints = []struct{ path, what string }{
	{"/debug/pprof/", "pprof's index: goroutine, heap, allocs, block, mutex, threadcreate profiles (go tool pprof http://HOST:PORT/debug/pprof/heap)"},
	{"/debug/pprof/profile", "a CPU profile, 30 s unless ?seconds=N"},
	{"/debug/pprof/trace", "an execution trace, 1 s unless ?seconds=N"},
	{"/debug/pprof/cmdline", "the command line"},
	{"/debug/pprof/symbol", "symbols of program counters, for pprof"},
	{"/rlconfig", "the rules in force, one a line"},
}

// debugHandler is the debug listener's handler (envoyproxy/ratelimit's
// DEBUG_HOST and DEBUG_PORT): pprof, the rules in force, and at / the list
// of both.
func debugHandler(rules func() *config.Config) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/rlconfig", envoyrls.RulesHandler(rules))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, e := range debugEndpoints {
			_, _ = io.WriteString(w, e.path+": "+e.what+"\n")
		}
	})
	return mux
}
