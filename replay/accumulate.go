package replay

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// accumulator counts one run's outcomes as they come, in memory bounded by
// the clients and rules seen (and the minutes that had would-be 429s), not
// by the number of requests.
type accumulator struct {
	states  [failed + 1]int64
	rules   map[string]*ruleAcc
	clients map[string]*clientAcc
	minutes map[int64]map[string]int64 // Unix minute → rule → would-be 429s
	reasons map[string]int64           // why requests were not checked
}

// ruleAcc is one rule's counts.
type ruleAcc struct {
	lim               limit.Limit
	shadow            bool
	checked, denied   int64
	limited, shadowed int64
	retry             map[int64]int64 // Retry-After seconds → requests
}

// clientAcc is one client's counts.
type clientAcc struct {
	requests, limited, shadowed, banned int64
	longest                             int64 // Retry-After seconds
}

// maxReasons bounds the distinct reasons kept for requests not checked.
const maxReasons = 20

func (a *accumulator) init() {
	a.rules = map[string]*ruleAcc{}
	a.clients = map[string]*clientAcc{}
	a.minutes = map[int64]map[string]int64{}
	a.reasons = map[string]int64{}
}

// add counts the request r just served, at now.
func (a *accumulator) add(r *run, now time.Time) state {
	st, rule, retry := r.stateOf()
	a.states[st]++
	for _, c := range r.checks {
		ra := a.rule(c.Rule, ruleLimit{c.Decision.Limit, c.Shadow})
		ra.checked++
		if !c.Decision.Allowed {
			ra.denied++
		}
	}
	if st == failed {
		reason := r.failureReason()
		if _, ok := a.reasons[reason]; !ok && len(a.reasons) >= maxReasons {
			reason = "other"
		}
		a.reasons[reason]++
		return st
	}
	secs := retrySeconds(retry)
	if st == limited || st == shadowed {
		ra := a.rule(rule, ruleLimit{})
		if st == limited {
			ra.limited++
		} else {
			ra.shadowed++
		}
		ra.retry[secs]++
		m := now.Unix() / 60
		if a.minutes[m] == nil {
			a.minutes[m] = map[string]int64{}
		}
		a.minutes[m][rule]++
	}
	c := a.clients[r.event.Client]
	if c == nil {
		c = &clientAcc{}
		a.clients[strings.Clone(r.event.Client)] = c
	}
	c.requests++
	switch st {
	case limited:
		c.limited++
	case shadowed:
		c.shadowed++
	case banned:
		c.banned++
	}
	if st != passed {
		c.longest = max(c.longest, secs)
	}
	return st
}

// rule returns rule's counts, made under rl if new.
func (a *accumulator) rule(rule string, rl ruleLimit) *ruleAcc {
	ra := a.rules[rule]
	if ra == nil {
		ra = &ruleAcc{lim: rl.lim, shadow: rl.shadow, retry: map[int64]int64{}}
		a.rules[rule] = ra
	}
	return ra
}

// retrySeconds is a wait as the Retry-After header carries it: whole
// seconds, rounded up, at least 1 (the middleware's rule); 0 for none.
func retrySeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// run reports the accumulated counts, naming top clients.
func (a *accumulator) report(name string, top int) Run {
	out := Run{Name: name, Outcomes: Outcomes{Passed: a.states[passed], Limited: a.states[limited],
		ShadowLimited: a.states[shadowed], Banned: a.states[banned], Unchecked: a.states[failed]}}
	for rule, ra := range a.rules {
		rr := RuleReport{Rule: rule, Shadow: ra.shadow, Checked: ra.checked, Denied: ra.denied,
			Limited: ra.limited, ShadowLimited: ra.shadowed}
		if ra.lim.Rate > 0 {
			rr.Limit = ra.lim.String()
		}
		rr.RetryAfterMedian, rr.RetryAfterMax = median(ra.retry)
		out.Rules = append(out.Rules, rr)
	}
	slices.SortFunc(out.Rules, func(x, y RuleReport) int {
		return cmp.Or(cmp.Compare(ruleRank(x.Rule), ruleRank(y.Rule)), strings.Compare(x.Rule, y.Rule))
	})
	for client, c := range a.clients {
		if c.limited+c.shadowed+c.banned == 0 {
			continue
		}
		out.Clients = append(out.Clients, ClientReport{Client: client, Requests: c.requests, Limited: c.limited,
			ShadowLimited: c.shadowed, Banned: c.banned, LongestRetryAfter: c.longest})
	}
	slices.SortFunc(out.Clients, func(x, y ClientReport) int {
		return cmp.Or(cmp.Compare(y.Limited+y.ShadowLimited+y.Banned, x.Limited+x.ShadowLimited+x.Banned),
			cmp.Compare(y.Requests, x.Requests), strings.Compare(x.Client, y.Client))
	})
	out.Clients = out.Clients[:min(len(out.Clients), top)]
	for m, byRule := range a.minutes {
		mr := Minute{Start: time.Unix(m*60, 0).UTC(), ByRule: byRule}
		for _, n := range byRule {
			mr.WouldBe429 += n
		}
		out.Minutes = append(out.Minutes, mr)
	}
	slices.SortFunc(out.Minutes, func(x, y Minute) int { return x.Start.Compare(y.Start) })
	if len(out.Minutes) > 0 {
		first, worst := out.Minutes[0], out.Minutes[0]
		for _, m := range out.Minutes {
			if m.WouldBe429 > worst.WouldBe429 {
				worst = m
			}
		}
		out.FirstMinute, out.WorstMinute = &first, &worst
	}
	for reason, n := range a.reasons {
		out.Unchecked = append(out.Unchecked, Reason{Reason: reason, Requests: n})
	}
	slices.SortFunc(out.Unchecked, func(x, y Reason) int {
		return cmp.Or(cmp.Compare(y.Requests, x.Requests), strings.Compare(x.Reason, y.Reason))
	})
	return out
}

// ruleRank orders rules as the rules engine checks them: the ban list,
// global, per_ip, per_user, tiers, endpoints, default, and the penalty,
// each rule's reserve check just before it.
func ruleRank(rule string) int {
	reserve := 0
	if r, ok := strings.CutPrefix(rule, "reserve:"); ok {
		rule, reserve = r, -1
	}
	rank := 6
	switch {
	case rule == "ban":
		rank = 0
	case rule == "global":
		rank = 1
	case rule == "per_ip":
		rank = 2
	case rule == "per_user":
		rank = 3
	case strings.HasPrefix(rule, "tier:"):
		rank = 4
	case strings.HasPrefix(rule, "endpoint:"):
		rank = 5
	case rule == "penalty":
		rank = 8
	case rule == "default":
		rank = 7
	}
	return 2*rank + reserve
}

// median returns the median and the largest of the values counted in h.
func median(h map[int64]int64) (med, largest int64) {
	var total int64
	keys := make([]int64, 0, len(h))
	for v, n := range h {
		keys = append(keys, v)
		total += n
	}
	slices.Sort(keys)
	var seen int64
	found := false
	for _, v := range keys {
		seen += h[v]
		if !found && 2*seen >= total {
			med, found = v, true
		}
		largest = v
	}
	return med, largest
}
