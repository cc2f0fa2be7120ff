// Package rlscompat is the compatibility suite of Envoy's rate limit
// service: one case per documented behaviour of envoyproxy/ratelimit's
// configuration and protocol, each a sequence of ShouldRateLimit calls and
// the answers envoyproxy/ratelimit gives them. It runs over a real gRPC
// client against any RLS v3 server: hybridlimit's (in make test) and
// envoyproxy/ratelimit's own (make rls-compat, from the bench module), so
// that both are held to the same answers.
//
// Every case counts on its own descriptors, in windows of an hour or more,
// so cases never meet; a run waits out the last seconds of an hour rather
// than straddle its boundary. Run it against a server whose Redis and
// memory are fresh.
package rlscompat

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Domain is the domain of Config.
const Domain = "compat"

// Config is the configuration file both services load, as
// envoyproxy/ratelimit's documentation writes its examples.
const Config = `domain: compat
descriptors:
  # Example 1: a key and a value.
  - key: database
    value: users
    rate_limit: {unit: hour, requests_per_unit: 3}

  # Example 3: any value of a key, each value counted apart; a value more
  # specific wins; zero blocks.
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: hour, requests_per_unit: 0}

  # Example 2: nested descriptors.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 4}

  # Example 4: a rule applies where the descriptor ends.
  - key: example4
    value: value
    rate_limit: {unit: hour, requests_per_unit: 300}

  # Example 5: unlimited.
  - key: ldap
    rate_limit: {unlimited: true}

  # Example 6: shadow mode.
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: user
        value: user-b
        rate_limit: {unit: hour, requests_per_unit: 1}

  # Example 7: replaces.
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          unit: hour
          requests_per_unit: 2
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          unit: hour
          requests_per_unit: 3

  # Example 8: detailed metrics change no decision.
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}

  # Example 9: wildcards, first written first.
  - key: wild
    value: value*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: wild
    value: val*
    rate_limit: {unit: hour, requests_per_unit: 2}

  # Example 10: value_to_metric changes no decision.
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 1}

  # Example 11: shared thresholds for a wildcard.
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}

  # Quota mode: over the limit answers OK.
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}

  # Weighted requests.
  - key: weighted
    rate_limit: {unit: hour, requests_per_unit: 5}

  # Every unit.
  - key: unit
    value: minute
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: unit
    value: hour
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: unit
    value: day
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: unit
    value: week
    rate_limit: {unit: week, requests_per_unit: 1000}
  - key: unit
    value: month
    rate_limit: {unit: month, requests_per_unit: 1000}
  - key: unit
    value: year
    rate_limit: {unit: year, requests_per_unit: 1000}
`

// Desc is one descriptor of a request.
type Desc struct {
	// Entries are key/value pairs: "key=value".
	Entries []string
	// Hits, when set, is the descriptor's own hits_addend.
	Hits *uint64
	// Limit, when set, is a limit the request carries for the descriptor.
	Limit *Limit
}

// Limit is a descriptor's current limit.
type Limit struct {
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	Name            string
}

// Want is the expected status of one descriptor.
type Want struct {
	Code      rlsv3.RateLimitResponse_Code
	Limit     *Limit
	Remaining uint32
	// Reset: duration_until_reset is set, and is envoyproxy/ratelimit's:
	// the seconds left in the unit's window, counted from the epoch.
	Reset bool
}

// Step is one request and the answer it must get.
type Step struct {
	Domain  string // "" means Domain
	Hits    uint32 // the request's hits_addend
	Descs   []Desc
	Overall rlsv3.RateLimitResponse_Code
	Want    []Want
	// Err: the request must fail (gRPC status not OK), whatever the code.
	Err bool
}

// Case is one documented behaviour.
type Case struct {
	Name string
	// Doc says what behaviour the case checks, as the documentation of
	// envoyproxy/ratelimit states it.
	Doc   string
	Steps []Step
}

// Helpers for writing cases.

func d(entries ...string) Desc { return Desc{Entries: entries} }

func hits(n uint64) *uint64 { return &n }

func lim(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) *Limit {
	return &Limit{RequestsPerUnit: rpu, Unit: unit}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT

	hour  = rlsv3.RateLimitResponse_RateLimit_HOUR
	day   = rlsv3.RateLimitResponse_RateLimit_DAY
	week  = rlsv3.RateLimitResponse_RateLimit_WEEK
	month = rlsv3.RateLimitResponse_RateLimit_MONTH
	year  = rlsv3.RateLimitResponse_RateLimit_YEAR
	min_  = rlsv3.RateLimitResponse_RateLimit_MINUTE
)

func okw(remaining uint32, l *Limit) Want {
	return Want{Code: ok, Limit: l, Remaining: remaining, Reset: true}
}
func overw(l *Limit) Want { return Want{Code: over, Limit: l, Reset: true} }

var none = Want{Code: ok}

// one is a step of one descriptor.
func one(desc Desc, w Want) Step {
	code := ok
	if w.Code == over {
		code = over
	}
	return Step{Descs: []Desc{desc}, Overall: code, Want: []Want{w}}
}

// Cases returns the suite.
func Cases() []Case {
	users := lim(3, hour)
	perIP := lim(2, hour)
	blocked := lim(0, hour)
	marketing := lim(2, day)
	perNumber := lim(4, day)
	shadow := lim(1, hour)
	specific := &Limit{RequestsPerUnit: 2, Unit: hour, Name: "specific_limit"}
	replacing := lim(3, hour)
	one1 := lim(1, hour)
	two := lim(2, hour)
	five := lim(5, hour)
	return []Case{
		{Name: "key and value", Doc: "a descriptor matching a key and value is limited by its rule, counting down remaining",
			Steps: []Step{
				one(d("database=users"), okw(2, users)),
				one(d("database=users"), okw(1, users)),
				one(d("database=users"), okw(0, users)),
				one(d("database=users"), overw(users)),
				one(d("database=users"), overw(users)),
			}},
		{Name: "case sensitive", Doc: "descriptors are case-sensitive", Steps: []Step{one(d("database=Users"), none), one(d("Database=users"), none)}},
		{Name: "any value counted apart", Doc: "a key without a value matches any value, and each value gets its own limit",
			Steps: []Step{
				one(d("remote_address=10.0.0.1"), okw(1, perIP)),
				one(d("remote_address=10.0.0.1"), okw(0, perIP)),
				one(d("remote_address=10.0.0.1"), overw(perIP)),
				one(d("remote_address=10.0.0.2"), okw(1, perIP)),
			}},
		{Name: "most specific wins, zero blocks", Doc: "key and value are tried before the key alone; requests_per_unit 0 blocks",
			Steps: []Step{one(d("remote_address=50.0.0.5"), overw(blocked)), one(d("remote_address=50.0.0.5"), overw(blocked))}},
		{Name: "nested descriptors", Doc: "a nested rule applies to the descriptor of both entries; several descriptors in one request are each limited, the overall code is their OR",
			Steps: []Step{
				{Descs: []Desc{d("message_type=marketing", "to_number=2061111111"), d("to_number=2061111111")}, Overall: ok,
					Want: []Want{okw(1, marketing), okw(3, perNumber)}},
				{Descs: []Desc{d("message_type=marketing", "to_number=2061111111"), d("to_number=2061111111")}, Overall: ok,
					Want: []Want{okw(0, marketing), okw(2, perNumber)}},
				{Descs: []Desc{d("message_type=marketing", "to_number=2061111111"), d("to_number=2061111111")}, Overall: over,
					Want: []Want{overw(marketing), okw(1, perNumber)}},
				{Descs: []Desc{d("message_type=marketing", "to_number=2062222222"), d("to_number=2061111111")}, Overall: ok,
					Want: []Want{okw(1, marketing), okw(0, perNumber)}},
				one(d("message_type=transactional", "to_number=2061111111"), none),
			}},
		{Name: "depth must match", Doc: "a rule applies only to a descriptor with as many entries as its level",
			Steps: []Step{
				one(d("example4=value", "subkey=subvalue"), none),
				one(d("message_type=marketing"), none),
				one(d("example4=value"), okw(299, lim(300, hour))),
			}},
		{Name: "unlimited", Doc: "an unlimited descriptor is OK with limit_remaining MaxUint32",
			Steps: []Step{one(d("ldap=anything"), Want{Code: ok, Remaining: math.MaxUint32}), one(d("ldap=anything"), Want{Code: ok, Remaining: math.MaxUint32})}},
		{Name: "shadow mode", Doc: "a rule in shadow_mode always answers OK, while counting",
			Steps: []Step{
				one(d("service=auth", "user=user-a"), okw(0, shadow)),
				one(d("service=auth", "user=user-a"), Want{Code: ok, Limit: shadow, Reset: true}),
				one(d("service=auth", "user=user-b"), okw(0, shadow)),
				one(d("service=auth", "user=user-b"), overw(shadow)),
			}},
		{Name: "replaces", Doc: "a rule that replaces a named one drops it in the requests where both match, and leaves its count alone",
			Steps: []Step{
				{Descs: []Desc{d("key_1=value_1", "user=bkthomps"), d("key_2=value_2", "user=bkthomps")}, Overall: ok,
					Want: []Want{none, okw(2, replacing)}},
				{Descs: []Desc{d("key_1=value_1", "user=bkthomps"), d("key_2=value_2", "user=bkthomps")}, Overall: ok,
					Want: []Want{none, okw(1, replacing)}},
				one(d("key_1=value_1", "user=bkthomps"), okw(1, specific)),
				one(d("key_1=value_1", "user=bkthomps"), okw(0, specific)),
				one(d("key_1=value_1", "user=bkthomps"), overw(specific)),
			}},
		{Name: "detailed metric", Doc: "detailed_metric names metrics, and changes no decision",
			Steps: []Step{one(d("detailed=a"), okw(0, one1)), one(d("detailed=a"), overw(one1)), one(d("detailed=b"), okw(0, one1))}},
		{Name: "wildcard", Doc: "a value ending in * matches every value it prefixes, each counted apart; the first wildcard written wins",
			Steps: []Step{
				one(d("wild=value1"), okw(0, one1)),
				one(d("wild=value1"), overw(one1)),
				one(d("wild=value2"), okw(0, one1)),
				one(d("wild=valid"), okw(1, two)),
				one(d("wild=other"), none),
			}},
		{Name: "value to metric", Doc: "value_to_metric names metrics, and changes no decision",
			Steps: []Step{one(d("route=api", "method=GET"), okw(0, one1)), one(d("route=api", "method=GET"), overw(one1)), one(d("route=web", "method=GET"), okw(0, one1))}},
		{Name: "share threshold", Doc: "share_threshold: every value a wildcard matches shares one count",
			Steps: []Step{one(d("files=files/a.pdf"), okw(1, two)), one(d("files=files/b.csv"), okw(0, two)), one(d("files=files/c.txt"), overw(two))}},
		{Name: "quota mode", Doc: "a rule in quota_mode answers OK over its limit, with the limit and no reset",
			Steps: []Step{one(d("quota=q"), okw(0, one1)), one(d("quota=q"), Want{Code: ok, Limit: one1})}},
		{Name: "request hits_addend", Doc: "hits_addend weighs a request; denied hits count too, so a client over the limit stays over it",
			Steps: []Step{
				{Hits: 3, Descs: []Desc{d("weighted=a")}, Overall: ok, Want: []Want{okw(2, five)}},
				{Hits: 3, Descs: []Desc{d("weighted=a")}, Overall: over, Want: []Want{overw(five)}},
				{Hits: 1, Descs: []Desc{d("weighted=a")}, Overall: over, Want: []Want{overw(five)}},
				{Hits: 0, Descs: []Desc{d("weighted=b")}, Overall: ok, Want: []Want{okw(4, five)}},
			}},
		{Name: "hits_addend beyond the limit", Doc: "a request heavier than the limit is over it, and counts",
			Steps: []Step{
				{Hits: 6, Descs: []Desc{d("weighted=c")}, Overall: over, Want: []Want{overw(five)}},
				{Hits: 1, Descs: []Desc{d("weighted=c")}, Overall: over, Want: []Want{overw(five)}},
			}},
		{Name: "descriptor hits_addend", Doc: "a descriptor's own hits_addend wins over the request's; zero checks without counting",
			Steps: []Step{
				{Hits: 1, Descs: []Desc{{Entries: []string{"weighted=d"}, Hits: hits(0)}}, Overall: ok, Want: []Want{okw(5, five)}},
				{Hits: 1, Descs: []Desc{{Entries: []string{"weighted=d"}, Hits: hits(5)}, d("weighted=e")}, Overall: ok, Want: []Want{okw(0, five), okw(4, five)}},
				{Hits: 1, Descs: []Desc{{Entries: []string{"weighted=d"}, Hits: hits(0)}}, Overall: ok, Want: []Want{okw(0, five)}},
				{Hits: 1, Descs: []Desc{{Entries: []string{"weighted=d"}, Hits: hits(1)}}, Overall: over, Want: []Want{overw(five)}},
				{Hits: 1, Descs: []Desc{{Entries: []string{"weighted=d"}, Hits: hits(0)}}, Overall: over, Want: []Want{overw(five)}},
				{Descs: []Desc{{Entries: []string{"remote_address=50.0.0.6"}, Hits: hits(0)}}, Overall: ok, Want: []Want{okw(2, perIP)}},
			}},
		{Name: "limit in the request", Doc: "a descriptor carrying its own limit is limited by it, whatever the configuration",
			Steps: []Step{
				{Descs: []Desc{{Entries: []string{"anything=x"}, Limit: lim(1, hour)}}, Overall: ok, Want: []Want{okw(0, lim(1, hour))}},
				{Descs: []Desc{{Entries: []string{"anything=x"}, Limit: lim(1, hour)}}, Overall: over, Want: []Want{overw(lim(1, hour))}},
				{Descs: []Desc{{Entries: []string{"database=users"}, Limit: lim(5, day)}}, Overall: ok, Want: []Want{okw(4, lim(5, day))}},
			}},
		{Name: "unknown domain", Doc: "a domain without configuration limits nothing",
			Steps: []Step{{Domain: "nowhere", Descs: []Desc{d("database=users")}, Overall: ok, Want: []Want{none}}}},
		{Name: "bad requests", Doc: "an empty domain or no descriptors is an error",
			Steps: []Step{{Domain: "-", Descs: []Desc{d("database=users")}, Err: true}, {Err: true}}},
		{Name: "units", Doc: "minute to year: a month is 30 days, a year 365, windows aligned to the epoch; duration_until_reset is the seconds left in the window",
			Steps: []Step{
				one(d("unit=minute"), okw(999, lim(1000, min_))),
				one(d("unit=hour"), okw(999, lim(1000, hour))),
				one(d("unit=day"), okw(999, lim(1000, day))),
				one(d("unit=week"), okw(999, lim(1000, week))),
				one(d("unit=month"), okw(999, lim(1000, month))),
				one(d("unit=year"), okw(999, lim(1000, year))),
			}},
	}
}

// Result is the outcome of one case: the first difference from the
// expected answers, if any.
type Result struct {
	Case Case
	Err  error
}

// Headers names the response headers the server under test was told to
// add (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED with
// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER). The
// zero value means headers off: no answer may carry any header.
type Headers struct {
	Limit, Remaining, Reset string
}

// Run runs every case against client, in order, and returns their results.
// Every answer's headers are checked too, against headers: none when it is
// the zero value; else, on every answer with a descriptor under a limit,
// exactly the three named, for the descriptor closest to its limit (the
// last one over it, if any). It fails only if ctx ends.
func Run(ctx context.Context, client rlsv3.RateLimitServiceClient, headers Headers) ([]Result, error) {
	if err := awayFromBoundary(ctx); err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range Cases() {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, Result{Case: c, Err: runCase(ctx, client, c, headers)})
	}
	return out, nil
}

// awayFromBoundary waits, when the current minute ends within 15 seconds,
// until it has ended, so that the whole suite (a second or two) runs
// within one minute, and so within one hour and one day.
func awayFromBoundary(ctx context.Context) error {
	now := time.Now()
	if left := time.Minute - time.Duration(now.UnixNano()%int64(time.Minute)); left < 15*time.Second {
		t := time.NewTimer(left + 100*time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func runCase(ctx context.Context, client rlsv3.RateLimitServiceClient, c Case, headers Headers) error {
	for i, st := range c.Steps {
		req := request(st)
		resp, err := client.ShouldRateLimit(ctx, req)
		switch {
		case st.Err && err == nil:
			return fmt.Errorf("step %d: want an error, got %s", i+1, show(resp))
		case st.Err:
			continue
		case err != nil:
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		now := time.Now()
		if msg := compare(st, resp, now); msg != "" {
			return fmt.Errorf("step %d (%s): %s", i+1, describe(st), msg)
		}
		if msg := compareHeaders(st, resp, headers, now); msg != "" {
			return fmt.Errorf("step %d (%s): %s", i+1, describe(st), msg)
		}
	}
	return nil
}

func request(st Step) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: st.Domain, HitsAddend: st.Hits}
	switch st.Domain {
	case "":
		req.Domain = Domain
	case "-":
		req.Domain = ""
	}
	for _, dsc := range st.Descs {
		pd := &commonv3.RateLimitDescriptor{}
		for _, e := range dsc.Entries {
			k, v, _ := strings.Cut(e, "=")
			pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		if dsc.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*dsc.Hits)
		}
		if dsc.Limit != nil {
			pd.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: dsc.Limit.RequestsPerUnit, Unit: typev3.RateLimitUnit(dsc.Limit.Unit)}
		}
		req.Descriptors = append(req.Descriptors, pd)
	}
	return req
}

// unitSeconds is envoyproxy/ratelimit's length of a unit.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case min_:
		return 60
	case hour:
		return 3600
	case day:
		return 86400
	case week:
		return 7 * 86400
	case month:
		return 30 * 86400
	case year:
		return 365 * 86400
	}
	return 0
}

// compare returns how resp differs from what st wants, "" if it does not.
func compare(st Step, resp *rlsv3.RateLimitResponse, now time.Time) string {
	if resp.GetOverallCode() != st.Overall {
		return fmt.Sprintf("overall_code %v, want %v (%s)", resp.GetOverallCode(), st.Overall, show(resp))
	}
	if len(resp.GetStatuses()) != len(st.Want) {
		return fmt.Sprintf("%d statuses, want %d (%s)", len(resp.GetStatuses()), len(st.Want), show(resp))
	}
	for i, w := range st.Want {
		got := resp.GetStatuses()[i]
		var diffs []string
		if got.GetCode() != w.Code {
			diffs = append(diffs, fmt.Sprintf("code %v, want %v", got.GetCode(), w.Code))
		}
		gl := got.GetCurrentLimit()
		switch {
		case w.Limit == nil && gl != nil:
			diffs = append(diffs, fmt.Sprintf("current_limit %v, want none", gl))
		case w.Limit != nil && gl == nil:
			diffs = append(diffs, "no current_limit")
		case w.Limit != nil && (gl.GetRequestsPerUnit() != w.Limit.RequestsPerUnit || gl.GetUnit() != w.Limit.Unit || gl.GetName() != w.Limit.Name):
			diffs = append(diffs, fmt.Sprintf("current_limit %d/%v %q, want %d/%v %q", gl.GetRequestsPerUnit(), gl.GetUnit(), gl.GetName(), w.Limit.RequestsPerUnit, w.Limit.Unit, w.Limit.Name))
		}
		if got.GetLimitRemaining() != w.Remaining {
			diffs = append(diffs, fmt.Sprintf("limit_remaining %d, want %d", got.GetLimitRemaining(), w.Remaining))
		}
		reset := got.GetDurationUntilReset()
		switch {
		case !w.Reset && reset != nil:
			diffs = append(diffs, fmt.Sprintf("duration_until_reset %v, want none", reset.AsDuration()))
		case w.Reset && reset == nil:
			diffs = append(diffs, "no duration_until_reset")
		case w.Reset && w.Limit != nil:
			secs := unitSeconds(w.Limit.Unit)
			want := secs - now.Unix()%secs
			if d := reset.GetSeconds() - want; d < -2 || d > 2 || reset.GetNanos() != 0 {
				diffs = append(diffs, fmt.Sprintf("duration_until_reset %v, want %ds (the rest of the %v window)", reset.AsDuration(), want, w.Limit.Unit))
			}
		}
		if len(diffs) > 0 {
			return fmt.Sprintf("status %d: %s", i, strings.Join(diffs, "; "))
		}
	}
	return ""
}

// compareHeaders returns how resp's headers differ from what st wants
// under headers, "" if they do not. Every header name is checked: none may
// be empty, and none may be there unless asked for.
func compareHeaders(st Step, resp *rlsv3.RateLimitResponse, headers Headers, now time.Time) string {
	got := resp.GetResponseHeadersToAdd()
	for _, h := range got {
		if h.GetKey() == "" {
			return fmt.Sprintf("a header with an empty name (value %q) among %s", h.GetValue(), showHeaders(got))
		}
	}
	// The descriptor closest to its limit, as envoyproxy/ratelimit picks it:
	// the least remaining among those under a limit, then the last one over
	// its limit.
	closest, least := -1, uint32(math.MaxUint32)
	if headers != (Headers{}) {
		for i, w := range st.Want {
			if w.Limit != nil && w.Remaining < least {
				closest, least = i, w.Remaining
			}
			if w.Code == over {
				closest, least = i, 0
			}
		}
	}
	if closest < 0 {
		if len(got) > 0 {
			return fmt.Sprintf("headers %s, want none", showHeaders(got))
		}
		return ""
	}
	w := st.Want[closest]
	secs := unitSeconds(w.Limit.Unit)
	resetNow := secs - now.Unix()%secs
	want := []struct{ name, value string }{
		{headers.Limit, fmt.Sprint(w.Limit.RequestsPerUnit)},
		{headers.Remaining, fmt.Sprint(w.Remaining)},
		{headers.Reset, fmt.Sprint(resetNow)},
	}
	if len(got) != len(want) {
		return fmt.Sprintf("headers %s, want %s: %s, %s: %s, %s: about %s", showHeaders(got), want[0].name, want[0].value, want[1].name, want[1].value, want[2].name, want[2].value)
	}
	for i, h := range got {
		if h.GetKey() != want[i].name {
			return fmt.Sprintf("header %d named %q, want %q (%s)", i, h.GetKey(), want[i].name, showHeaders(got))
		}
		if i < 2 && h.GetValue() != want[i].value {
			return fmt.Sprintf("header %s: %q, want %q", h.GetKey(), h.GetValue(), want[i].value)
		}
	}
	var reset int64
	if _, err := fmt.Sscan(got[2].GetValue(), &reset); err != nil || reset-resetNow < -2 || reset-resetNow > 2 {
		return fmt.Sprintf("header %s: %q, want about %d (the rest of the %v window)", got[2].GetKey(), got[2].GetValue(), resetNow, w.Limit.Unit)
	}
	return ""
}

func showHeaders(hs []*corev3.HeaderValue) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%q: %q", h.GetKey(), h.GetValue()))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func describe(st Step) string {
	var parts []string
	for _, dsc := range st.Descs {
		s := "(" + strings.Join(dsc.Entries, ",") + ")"
		if dsc.Hits != nil {
			s += fmt.Sprintf("×%d", *dsc.Hits)
		}
		if dsc.Limit != nil {
			s += fmt.Sprintf(" limit %d/%v", dsc.Limit.RequestsPerUnit, dsc.Limit.Unit)
		}
		parts = append(parts, s)
	}
	s := strings.Join(parts, " ")
	if st.Hits > 0 {
		s = fmt.Sprintf("hits %d %s", st.Hits, s)
	}
	return s
}

func show(resp *rlsv3.RateLimitResponse) string {
	var parts []string
	for _, s := range resp.GetStatuses() {
		p := s.GetCode().String()
		if l := s.GetCurrentLimit(); l != nil {
			p += fmt.Sprintf(" %d/%v", l.GetRequestsPerUnit(), l.GetUnit())
		}
		p += fmt.Sprintf(" remaining %d", s.GetLimitRemaining())
		if r := s.GetDurationUntilReset(); r != nil {
			p += fmt.Sprintf(" reset %v", r.AsDuration())
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("%v [%s]", resp.GetOverallCode(), strings.Join(parts, "; "))
}
