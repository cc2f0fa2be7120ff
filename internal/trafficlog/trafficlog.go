// Package trafficlog writes realistic HTTP access logs from a seed, in
// nginx's default "main" format (the Combined Log Format and the
// X-Forwarded-For header): the example log of docs/rules.md and the
// input of replay's benchmark. Every request reaches the service through
// its load balancer, which logs as the peer and appends the client's
// address to X-Forwarded-For.
//
// The traffic is the kinds a service sees: well-behaved clients browsing
// and searching at their own pace, an abuser that floods the search for a
// few minutes, and a crawler that walks every item behind a forward proxy,
// sharing the proxy's address with the office users behind it. The same
// Scenario always writes the same bytes.
package trafficlog

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// LoadBalancer is the address every request comes from: the service's load
// balancer (trust it: -trusted-proxies 10.0.0.0/8).
const LoadBalancer = "10.0.0.2"

// Addresses of the actors, all from the documentation ranges.
const (
	Abuser       = "203.0.113.66"
	Crawler      = "203.0.113.50"  // what the crawler claims, behind its proxy
	CrawlerProxy = "198.51.100.77" // the forward proxy the crawler and an office share
)

// Scenario is the traffic to write.
type Scenario struct {
	// Start and Duration are when the log starts and how long it lasts.
	Start    time.Time
	Duration time.Duration
	// Seed draws everything random.
	Seed uint64
	// Clients is how many well-behaved clients browse, each about
	// ClientRate requests a second; Office is how many of them sit behind
	// the crawler's proxy.
	Clients    int
	ClientRate float64
	Office     int
	// AbuseFrom and AbuseFor are when, from Start, the abuser floods the
	// search at AbuseRate a second; before and after it browses as a
	// client does. A zero AbuseFor means no abuser.
	AbuseFrom, AbuseFor time.Duration
	AbuseRate           float64
	// CrawlRate is the crawler's requests a second (0: none).
	CrawlRate float64
}

// request is one line to write, before its time is known to the second.
type request struct {
	at     time.Duration // since the second's start
	xff    string
	method string
	target string
	status int
	size   int
	agent  string
}

// Write writes the scenario's log to w and returns how many lines it
// wrote. It keeps one second of traffic in memory at a time.
func Write(w io.Writer, s Scenario) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	r := rand.New(rand.NewPCG(s.Seed, 0x72656c6179))
	words, agents := strings.Split(wordList, "\n"), strings.Split(agentList, "\n")
	clients := make([]client, s.Clients)
	for i := range clients {
		clients[i] = newClient(r, i, s, agents, words)
	}
	abuser := client{addr: Abuser, xff: Abuser, agent: "python-requests/2.31.0", rate: s.ClientRate, words: words}
	crawled := 0
	lines := 0
	var batch []request
	for sec := time.Duration(0); sec < s.Duration; sec += time.Second {
		batch = batch[:0]
		for i := range clients {
			batch = clients[i].second(r, batch)
		}
		switch {
		case s.AbuseFor > 0 && sec >= s.AbuseFrom && sec < s.AbuseFrom+s.AbuseFor:
			for range poisson(r, s.AbuseRate) {
				batch = append(batch, request{at: jitter(r), xff: abuser.addr, method: "GET",
					target: "/api/v1/search?q=" + words[r.IntN(len(words))] + "&page=" + fmt.Sprint(1+r.IntN(50)),
					status: 200, size: 2000 + r.IntN(6000), agent: abuser.agent})
			}
		case s.AbuseFor > 0:
			batch = abuser.second(r, batch)
		}
		for range poisson(r, s.CrawlRate) {
			crawled++
			batch = append(batch, request{at: jitter(r), xff: Crawler + ", " + CrawlerProxy, method: "GET",
				target: fmt.Sprintf("/api/v1/items/%d", 1000+crawled), status: 200, size: 800 + r.IntN(1500),
				agent: "ExampleBot/2.1 (+https://bot.example.com/about)"})
		}
		slices.SortStableFunc(batch, func(a, b request) int { return int(a.at - b.at) })
		stamp := s.Start.Add(sec).UTC().Format("02/Jan/2006:15:04:05 -0700")
		for _, q := range batch {
			lines++
			if _, err := fmt.Fprintf(bw, "%s - - [%s] \"%s %s HTTP/1.1\" %d %d \"-\" \"%s\" \"%s\"\n",
				LoadBalancer, stamp, q.method, q.target, q.status, q.size, q.agent, q.xff); err != nil {
				return lines, err
			}
		}
	}
	return lines, bw.Flush()
}

// client is a well-behaved client: it browses at its own rate.
type client struct {
	addr, xff string
	agent     string
	rate      float64
	words     []string
}

func newClient(r *rand.Rand, i int, s Scenario, agents, words []string) client {
	c := client{addr: clientAddr(i), agent: agents[r.IntN(len(agents))], rate: s.ClientRate * (0.5 + r.Float64()), words: words}
	c.xff = c.addr
	if i < s.Office {
		c.xff = fmt.Sprintf("192.168.1.%d, %s", 20+i, CrawlerProxy) // behind the crawler's proxy
		c.addr = CrawlerProxy
	}
	return c
}

// clientAddr is the i-th client's address: 192.0.2.10 on for a few, then
// spread over 198.18.0.0/15 (the benchmarking range).
func clientAddr(i int) string {
	if i < 200 {
		return fmt.Sprintf("192.0.2.%d", 10+i)
	}
	return fmt.Sprintf("198.%d.%d.%d", 18+i>>16&1, i>>8&255, i&255)
}

// second appends the client's requests of one second.
func (c *client) second(r *rand.Rand, batch []request) []request {
	for range poisson(r, c.rate) {
		q := request{at: jitter(r), xff: c.xff, method: "GET", status: 200, agent: c.agent}
		switch p := r.Float64(); {
		case p < 0.25:
			q.target, q.size = "/", 5200+r.IntN(300)
		case p < 0.6:
			q.target, q.size = fmt.Sprintf("/api/v1/items/%d", 1000+r.IntN(5000)), 800+r.IntN(1500)
		case p < 0.8:
			q.target, q.size = "/api/v1/search?q="+c.words[r.IntN(len(c.words))], 2000+r.IntN(6000)
		case p < 0.9:
			q.target, q.size = "/static/app.js", 48213
		case p < 0.96:
			q.method, q.target, q.status, q.size = "POST", "/api/v1/orders", 201, 310+r.IntN(40)
		default:
			q.target, q.status, q.size = fmt.Sprintf("/api/v1/items/%d", 90000+r.IntN(1000)), 404, 52
		}
		batch = append(batch, q)
	}
	return batch
}

// poisson draws how many events a Poisson process of rate per second has
// in one second (Knuth's method: the rates here are small).
func poisson(r *rand.Rand, rate float64) int {
	if rate <= 0 {
		return 0
	}
	l, k, p := math.Exp(-rate), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// jitter is a moment within a second.
func jitter(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(time.Second))) }

// The words searched for, and the browsers' user agents, one a line.
const (
	wordList  = "shoes\nlamp\ncoffee\ndesk\nbike\nkettle\njacket\nchair\nphone\ntent\nbooks\nguitar"
	agentList = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36\n" +
		"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15\n" +
		"Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0\n" +
		"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148"
)
