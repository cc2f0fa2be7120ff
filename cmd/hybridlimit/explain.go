package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/middleware"
	"github.com/hybridlimit/hybridlimit/remote"
	"github.com/hybridlimit/hybridlimit/rules"
)

// explainOptions is explain's command line.
type explainOptions struct {
	rulesFile string
	rulesSource
	keying
	method, path, remoteAddr string
	headers                  []string
	user, tier               string
	priority                 bool
	redis, prefix            string
	curl                     []string // a curl line, word by word
}

// defaultPeer is the peer explain gives a request when -remote-addr does
// not: an address of the documentation range, which no proxy list holds.
const defaultPeer = "192.0.2.1"

// runExplain says what the gateway (or the middleware) would do with one
// request under a rules file: the client's address and the trusted-proxy
// reasoning behind it, its key, the ban list, and the checks in the order
// they run with each one's key and limit; with -redis, each check's state
// now, read without spending or writing anything. Exit status: as lint's,
// 0 explained, 1 the rules have problems, 2 a file that cannot be read, a
// Redis that cannot be reached, or the command used wrongly.
func runExplain(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseExplainFlags(args, out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return withExit(exitUsage, err)
	}
	req, err := o.request()
	if err != nil {
		return withExit(exitUsage, fmt.Errorf("explain: %w", err))
	}
	rs, err := o.load("explain", o.rulesFile)
	if err != nil {
		return err
	}
	var store *remote.Store
	if o.redis != "" {
		client, where, err := gatewayRedis(o.redis)
		if err != nil {
			return withExit(exitUsage, fmt.Errorf("explain: %w", err))
		}
		defer client.Close()
		if store, err = explainStore(ctx, client, where, o.prefix); err != nil {
			return withExit(exitUsage, err)
		}
	}
	ex, err := explainRequest(ctx, rs, &o.keying, o.planning(), req, store)
	if err != nil {
		return withExit(exitUsage, err)
	}
	ex.redis, ex.prefix = o.redis, o.prefix
	ex.write(out)
	return nil
}

func parseExplainFlags(args []string, out io.Writer) (*explainOptions, error) {
	o := &explainOptions{}
	fs := newFlagSet("explain", out)
	fs.StringVar(&o.rulesFile, "rules", "", "the rules file (required)")
	o.rulesSource.register(fs)
	o.keying.register(fs)
	fs.StringVar(&o.method, "method", "", "the request's method (default GET)")
	fs.StringVar(&o.path, "path", "", "the request's path, with any query (default /)")
	fs.Func("H", "a request header, \"Name: value\"; repeat for more", func(s string) error {
		if k, _, ok := strings.Cut(s, ":"); !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("header %q: want Name: value", s)
		}
		o.headers = append(o.headers, s)
		return nil
	})
	fs.StringVar(&o.remoteAddr, "remote-addr", defaultPeer, "the address the request comes from (the TCP peer: a client, or a proxy in -trusted-proxies)")
	fs.StringVar(&o.user, "user", "", "the authenticated user, for per_user rules (a service's middleware knows it; the gateway does not)")
	fs.StringVar(&o.tier, "tier", "", "the client's tier, for tier rules (a service's middleware knows it; the gateway does not)")
	fs.BoolVar(&o.priority, "priority", false, "a high-priority request, which skips the priority reserve checks")
	fs.StringVar(&o.redis, "redis", "", "read each check's state now from this Redis (host:port or a redis:// URL), writing nothing: the state a fleet in sync mode keeps")
	fs.StringVar(&o.prefix, "prefix", "gw:", "the prefix of the limiter's keys in Redis (the gateway's is gw:)")
	if err := parseFlags(fs, args, true); err != nil {
		return nil, err
	}
	o.curl = fs.Args()
	errs := []error{o.rulesSource.check("explain", o.rulesFile)}
	if len(o.curl) > 0 && (o.method != "" || o.path != "" || len(o.headers) > 0) {
		errs = append(errs, errors.New("explain: give the request by -method, -path and -H, or as a curl line, not both"))
	}
	errs = append(errs, o.keying.check("explain"))
	return o, misuse(fs, errors.Join(errs...))
}

// request is the request the flags, or the curl line, describe.
func (o *explainOptions) request() (*http.Request, error) {
	var req *http.Request
	if len(o.curl) > 0 {
		var err error
		if req, err = curlRequest(o.curl); err != nil {
			return nil, err
		}
	} else {
		method, path := o.method, o.path
		if method == "" {
			method = "GET"
		}
		if path == "" {
			path = "/"
		}
		if !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("-path %q: want a path starting with /", path)
		}
		var err error
		if req, err = http.NewRequest(method, "http://gateway"+path, nil); err != nil {
			return nil, fmt.Errorf("-method %q -path %q: %w", method, path, err)
		}
		req.RequestURI = path
		for _, h := range o.headers {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	req.RemoteAddr = o.remoteAddr
	return req, nil
}

// planning is what the flags add to the gateway's keying: the user, tier
// and priority a service's middleware would know.
func (o *explainOptions) planning() middleware.Config {
	c := o.keying.middleware()
	if o.user != "" {
		c.User = func(context.Context) (string, bool) { return o.user, true }
	}
	if o.tier != "" {
		c.Tier = func(*http.Request) string { return o.tier }
	}
	if o.priority {
		c.Priority = func(*http.Request) bool { return true }
	}
	return c
}

// explainStore connects to the Redis of -redis, to read states from. It
// reads through remote.Store's peek, the read-only script of a Sync
// limiter's Peek; a hybrid.Limiter is not made, as its first contact
// would join the fleet (a heartbeat: a write).
func explainStore(ctx context.Context, client redis.UniversalClient, where, prefix string) (*remote.Store, error) {
	store, err := remote.New(client, remote.Options{Prefix: prefix, Node: "explain"})
	if err != nil {
		return nil, fmt.Errorf("explain: -prefix: %w", err)
	}
	ping, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(ping).Err(); err != nil {
		return nil, fmt.Errorf("explain: Redis at %s: %w", where, err)
	}
	return store, nil
}

// explanation is what explain found for one request.
type explanation struct {
	req     *http.Request
	rs      *rules.Rules
	client  clientKeying
	addr    netip.Addr
	steps   []httpkey.Step
	addrErr error
	plan    middleware.Plan
	planErr error
	states  []peeked // with -redis: each check's, in order
	redis   string
	prefix  string
}

// peeked is one check's state in Redis.
type peeked struct {
	d   remote.Decision
	err error
}

// explainRequest plans req under rs as the middleware would, with the
// gateway's keying k and what planning adds, and with store each check's
// state now (a check whose state cannot be read says why).
func explainRequest(ctx context.Context, rs *rules.Rules, k *keying, planning middleware.Config, req *http.Request, store *remote.Store) (explanation, error) {
	planner, err := middleware.NewPlanner(planning)
	if err != nil {
		return explanation{}, fmt.Errorf("explain: %w", err)
	}
	ex := explanation{req: req, rs: rs, client: k.client}
	ip := planner.IP()
	ex.addr, ex.steps, ex.addrErr = ip.Trace(req)
	ex.plan, ex.planErr = planner.Plan(req, rs, nil)
	if store == nil || ex.planErr != nil {
		return ex, nil
	}
	for _, c := range ex.plan.Checks {
		call, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := store.PeekN(call, c.Key, c.Limit, ex.plan.Cost, remote.Known{})
		cancel()
		ex.states = append(ex.states, peeked{d: d, err: err})
	}
	return ex, nil
}

// write prints the explanation.
func (ex *explanation) write(out io.Writer) {
	var b strings.Builder
	req := ex.req
	fmt.Fprintf(&b, "Request: %s %s from %s\n", req.Method, req.URL.RequestURI(), req.RemoteAddr)
	if !ex.rs.Enabled() {
		b.WriteString("\nThe rules are off (enabled: false): every request passes, nothing is checked.\n")
		_, _ = io.WriteString(out, b.String())
		return
	}
	if ex.plan.Request.Path != "" && ex.plan.Request.Path != req.URL.Path {
		fmt.Fprintf(&b, "  the rules match its path as %s (cleaned)\n", ex.plan.Request.Path)
	}
	b.WriteString("\n")
	ex.writeAddress(&b)
	if ex.planErr != nil {
		fmt.Fprintf(&b, "\nThe middleware cannot check this request: %v.\n", ex.planErr)
		b.WriteString("The gateway answers it 401 when an API key its -client needs is missing, 400 when a key is malformed, else 500.\n")
		_, _ = io.WriteString(out, b.String())
		return
	}
	p := ex.plan
	fmt.Fprintf(&b, "Client key: %s (-client %s)\n", p.Request.Client, ex.client)
	if p.Request.User != "" || p.Request.Tier != "" || p.Request.Priority {
		fmt.Fprintf(&b, "User %q, tier %q, priority %v\n", p.Request.User, p.Request.Tier, p.Request.Priority)
	}
	if p.Cost != 1 {
		fmt.Fprintf(&b, "Cost: %d\n", p.Cost)
	}
	if p.Banned {
		if ex.rs.Shadow() {
			fmt.Fprintf(&b, "\nBanned: %s is on the ban list; the rules are in shadow mode, so the ban is counted and the request passes unchecked.\n", p.Request.IP)
		} else {
			fmt.Fprintf(&b, "\nBanned: %s is on the ban list: the answer is 403, and nothing is checked.\n", p.Request.IP)
		}
		_, _ = io.WriteString(out, b.String())
		return
	}
	b.WriteString("Not on the ban list.\n")
	if pen, ok := ex.rs.Penalty(); ok {
		fmt.Fprintf(&b, "Penalty: a client limited %d times within %v is blocked for %v, doubling up to %v; strikes are in each node's memory, not shown here.\n",
			pen.Strikes, pen.Within, pen.Base, pen.Max)
	}
	if len(p.Checks) == 0 {
		b.WriteString("\nNo rule limits this request: it passes.\n")
		_, _ = io.WriteString(out, b.String())
		return
	}
	b.WriteString("\nChecks, in the order the middleware runs them. The first that denies answers 429 (a shadow check\n")
	b.WriteString("only counts), and the checks after it are not spent:\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	head := "  #\tRULE\tKEY\tLIMIT\tSHADOW"
	if ex.states != nil {
		head += "\tNOW"
	}
	fmt.Fprintln(tw, head)
	answer, retry := "passes", time.Duration(0)
	for i, c := range p.Checks {
		shadow := ""
		if c.Shadow {
			shadow = "shadow"
		}
		line := fmt.Sprintf("  %d\t%s\t%s\t%s\t%s", i+1, c.Rule, c.Key, c.Limit, shadow)
		if ex.states != nil {
			now, denies := ex.stateOf(i, answer != "passes")
			line += "\t" + now
			if denies && !c.Shadow && answer == "passes" {
				answer, retry = "429 by "+c.Rule, ex.states[i].d.RetryAfter
			}
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	table := b.String() // a check without shadow or state ends in the table's padding
	b.Reset()
	for line := range strings.Lines(table) {
		b.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	b.WriteString("\n")
	switch {
	case ex.states == nil:
		b.WriteString("Give -redis ADDR to read each check's state now (a fleet in sync mode keeps it there) and the answer it makes.\n")
	case answer == "passes":
		fmt.Fprintf(&b, "Answer now: passes (read from Redis at %s, prefix %q, spending nothing).\n", ex.redis, ex.prefix)
	default:
		fmt.Fprintf(&b, "Answer now: %s, Retry-After %d (read from Redis at %s, prefix %q, spending nothing).\n", answer,
			max(int64((retry+time.Second-1)/time.Second), 1), ex.redis, ex.prefix)
	}
	_, _ = io.WriteString(out, b.String())
}

// stateOf describes check i's state, and reports whether it denies;
// reached false for a check after a live denial.
func (ex *explanation) stateOf(i int, after bool) (string, bool) {
	s := ex.states[i]
	switch {
	case s.err != nil:
		return "unreadable: " + s.err.Error(), false
	case after:
		return "not reached", false
	case s.d.Allowed:
		return fmt.Sprintf("admits: %s left after it", strconv.FormatInt(s.d.Remaining, 10)), false
	}
	wait := s.d.RetryAfter.Round(time.Millisecond)
	if wait > 10*time.Second {
		wait = wait.Round(time.Second)
	}
	return fmt.Sprintf("denies: retry after %v", wait), true
}

// writeAddress tells how the client's address was found.
func (ex *explanation) writeAddress(b *strings.Builder) {
	if ex.addrErr != nil {
		fmt.Fprintf(b, "Client address: none: %v\n", ex.addrErr)
		return
	}
	fmt.Fprintf(b, "Client address: %s\n", ex.addr)
	for i, s := range ex.steps {
		last := i == len(ex.steps)-1
		fmt.Fprintf(b, "  %s %s: ", s.Source, s.Entry)
		switch {
		case !s.Addr.IsValid():
			fmt.Fprintf(b, "malformed: the reading stops at the last good address, %s\n", ex.addr)
		case !s.Trusted.IsValid() && i == 0:
			b.WriteString("not a trusted proxy: the client (forwarding headers are not believed from it)\n")
		case !s.Trusted.IsValid():
			b.WriteString("not a trusted proxy: the client\n")
		case last && i == 0:
			fmt.Fprintf(b, "a trusted proxy (%s) that forwarded nobody (no X-Forwarded-For): itself the client\n", s.Trusted)
		case last:
			fmt.Fprintf(b, "a trusted proxy (%s), the last entry: the client\n", s.Trusted)
		case i == 0:
			fmt.Fprintf(b, "a trusted proxy (%s): its %s is read, from the right\n", s.Trusted, ex.steps[1].Source)
		default:
			fmt.Fprintf(b, "a trusted proxy (%s): read on\n", s.Trusted)
		}
	}
	if ex.plan.Request.IPKey != "" && strings.TrimPrefix(ex.plan.Request.IPKey, "ip:") != ex.addr.String() {
		fmt.Fprintf(b, "  per_ip counts it as %s\n", ex.plan.Request.IPKey)
	}
}
