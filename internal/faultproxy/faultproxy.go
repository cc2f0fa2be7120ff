// Package faultproxy puts a real TCP proxy (Shopify's Toxiproxy, run in
// process) between a test's clients and a server, so the test can add latency
// or reset connections on the wire, as a network does, instead of faking a
// client.
package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	_ "github.com/Shopify/toxiproxy/v2/toxics" // registers the toxics
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy forwards a loopback port to an upstream address, with faults on
// demand. It is stopped when the test ends.
type Proxy struct {
	p *toxiproxy.Proxy
}

// Start proxies a free loopback port to upstream.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "upstream", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("faultproxy: start: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.p.Listen }

// Latency delays every byte in both directions by d, so a round trip takes
// 2d longer.
func (p *Proxy) Latency(t testing.TB, d time.Duration) {
	t.Helper()
	ms := d.Milliseconds()
	p.add(t, fmt.Sprintf(`{"name":"latency_down","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, ms))
	p.add(t, fmt.Sprintf(`{"name":"latency_up","type":"latency","stream":"upstream","attributes":{"latency":%d}}`, ms))
}

// ReplyLatency delays every byte from the server to the client by d, and
// nothing the other way: a request reaches the server, and runs there, at
// once; its reply comes d late. A client whose timeout is shorter than d
// gives up on a call the server has already carried out.
func (p *Proxy) ReplyLatency(t testing.TB, d time.Duration) {
	t.Helper()
	p.add(t, fmt.Sprintf(`{"name":"latency_down","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
}

// ResetPeers resets every connection as soon as it sends anything, until
// Clear: the client sees ECONNRESET.
func (p *Proxy) ResetPeers(t testing.TB) {
	t.Helper()
	p.add(t, `{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`)
}

// Clear removes every fault.
func (p *Proxy) Clear() { p.p.Toxics.ResetToxics(context.Background()) }

func (p *Proxy) add(t testing.TB, toxic string) {
	t.Helper()
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		t.Fatalf("faultproxy: add %s: %v", toxic, err)
	}
}
