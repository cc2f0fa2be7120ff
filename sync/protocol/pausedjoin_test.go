package protocol_test

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

// A fleet of two (FleetSize 2). b pauses for 3 s (a GC stop, SIGSTOP, a
// frozen VM) just as a's client makes the key contested: the contest holds
// b's even split back until b joins. b resumes, decides the requests that
// queued in its split, and joins only then. The fleet must stay within the
// bound afterwards. A change that gave the splits of joins not yet come to
// the pool a lease and a recovery time after the contest began (so that
// nodes FleetSize counts that never start would not hold the limit back)
// made a the key's home meanwhile; b's late join put the pool in debt that
// the home paid only at its renewal, 10 s on: 1,200 admitted in 8 s where
// the bound is 900. (Found in review; the change was taken back.)
func TestAPausedNodeThatJoinsLateStaysWithinTheBound(t *testing.T) {
	lim := limit.PerSecond(100) // burst 100
	f := newRvFleet(t, protocol.Config{Interval: testInterval, ActiveWindow: time.Second, FleetSize: 2}, "a", "b")
	a, b := f.nodes[0], f.nodes[1]
	f.advance(1100 * time.Millisecond)
	var admitted []int64 // when each admitted request was decided (ns)
	step := func(nodes ...*rvNode) {
		f.now += int64(f.cfg.Interval)
		for _, n := range nodes {
			n.s.Tick(f.now)
			f.beat(n)
			f.send(n)
		}
	}
	try := func(n *rvNode, k int) {
		for range k {
			if f.request(n, "k", lim) {
				admitted = append(admitted, f.now)
			}
		}
	}
	// b pauses for 3 s: nothing of it runs; a's client sends 100 a second.
	for pauseAt := f.now; f.now < pauseAt+int64(3*time.Second); {
		step(a)
		try(a, 2)
	}
	resume := f.now
	// On resume, b's server hands it the requests that queued meanwhile,
	// before its runner's next beat: decided in its even split.
	for range 60 {
		if res, err := b.eng.AllowN(f.now, "k", lim, 1); err == nil && res.Allowed {
			admitted = append(admitted, f.now)
		}
	}
	for f.now < resume+int64(12*time.Second) {
		step(a, b)
		try(a, 2) // 100 a second
		try(b, 1) // 50 a second: its even split's rate
	}
	// The worst window of each length from 1.2 s after b resumed (its own
	// settling: rounds and a lease) against the bound without a change of
	// the fleet, R·W + B.
	from := resume + int64(1200*time.Millisecond)
	judged := 0
	for _, w := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		worst := 0
		for s := from; s+int64(w) <= f.now; s += int64(f.cfg.Interval) {
			n := 0
			for _, at := range admitted {
				if at >= s && at < s+int64(w) {
					n++
				}
			}
			worst = max(worst, n)
			judged++
		}
		bound := 100*w.Seconds() + 100
		t.Logf("windows of %v from 1.2 s after b resumed: at most %d admitted, bound %.0f", w, worst, bound)
		if float64(worst) > bound {
			t.Errorf("windows of %v: %d admitted, over the bound %.0f", w, worst, bound)
		}
	}
	if judged == 0 {
		t.Fatal("no window judged")
	}
}
