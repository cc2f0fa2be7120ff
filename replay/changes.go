package replay

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/accesslog"
)

// maxExamples is how many changed requests a report shows.
const maxExamples = 10

// changeAcc counts the requests two runs answer differently.
type changeAcc struct {
	requests, refused, admitted int64
	clients                     map[string]*ClientChange
	examples                    []ChangedRequest
}

func (c *changeAcc) init() { c.clients = map[string]*ClientChange{} }

// refuses reports whether a client sees st as a refusal.
func refuses(st state) bool { return st == limited || st == banned }

// add counts the request e, which runs answered with states, at t.
func (c *changeAcc) add(runs []*run, states []state, e accesslog.Entry, t time.Time) {
	before, after := refuses(states[0]), refuses(states[1])
	if before == after {
		return
	}
	c.requests++
	client := cmp.Or(runs[1].event.Client, runs[0].event.Client)
	cc := c.clients[client]
	if cc == nil {
		cc = &ClientChange{Client: strings.Clone(client)}
		c.clients[cc.Client] = cc
	}
	cc.Requests++
	if after {
		c.refused++
		cc.NewlyRefused++
	} else {
		c.admitted++
		cc.NewlyAdmitted++
	}
	if len(c.examples) < maxExamples {
		c.examples = append(c.examples, ChangedRequest{Time: t.UTC(), Client: cc.Client, Method: e.Method, Target: e.Target,
			Before: answer(runs[0], states[0]), After: answer(runs[1], states[1])})
	}
}

// answer says how run answered its request, in state st.
func answer(r *run, st state) string {
	_, rule, _ := r.stateOf()
	switch st {
	case limited:
		return "429 by " + rule
	case banned:
		return "403 by " + rule
	case shadowed:
		return "passed (shadow 429 by " + rule + ")"
	case failed:
		return "not checked"
	}
	return "passed"
}

// report returns the changes, naming the top clients.
func (c *changeAcc) report(top int) Changes {
	out := Changes{Requests: c.requests, NewlyRefused: c.refused, NewlyAdmitted: c.admitted, Examples: c.examples}
	for _, cc := range c.clients {
		out.Clients = append(out.Clients, *cc)
	}
	slices.SortFunc(out.Clients, func(x, y ClientChange) int {
		return cmp.Or(cmp.Compare(y.Requests, x.Requests), strings.Compare(x.Client, y.Client))
	})
	out.Clients = out.Clients[:min(len(out.Clients), top)]
	if out.Examples == nil {
		out.Examples = []ChangedRequest{}
	}
	if out.Clients == nil {
		out.Clients = []ClientChange{}
	}
	return out
}
