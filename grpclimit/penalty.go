package grpclimit

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/rules"
)

// penalties keeps the rules.Penalty of the rules in force, as the HTTP
// middleware does: a reload that keeps the penalty block keeps the clients'
// history; one that changes it, or switches global shadow mode, starts every
// client afresh.
type penalties struct {
	maxClients int
	cur        atomic.Pointer[penaltyState]
	mu         sync.Mutex // serialises building a new state
}

// penaltyState is the penalty of one *rules.Rules.
type penaltyState struct {
	rules  *rules.Rules
	cfg    rules.PenaltyConfig
	shadow bool
	pen    *rules.Penalty // nil: the rules have no penalty
}

// get returns the penalty of rs, nil if it has none.
func (p *penalties) get(rs *rules.Rules) (*rules.Penalty, error) {
	if st := p.cur.Load(); st != nil && st.rules == rs {
		return st.pen, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	if old != nil && old.rules == rs {
		return old.pen, nil
	}
	cfg, ok := rs.Penalty()
	next := &penaltyState{rules: rs, cfg: cfg, shadow: rs.Shadow()}
	switch {
	case !ok:
	case old != nil && old.pen != nil && old.cfg == cfg && old.shadow == next.shadow:
		next.pen = old.pen
	default:
		pen, err := rules.NewPenalty(cfg, p.maxClients)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: penalty: %w", err)
		}
		next.pen = pen
	}
	p.cur.Store(next)
	return next.pen, nil
}
