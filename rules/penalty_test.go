package rules

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at0(d time.Duration) time.Time { return t0.Add(d) }

const sec = time.Second

func newTestPenalty(t *testing.T) *Penalty {
	t.Helper()
	p, err := NewPenalty(PenaltyConfig{Strikes: 3, Within: 60 * sec, Base: 10 * sec, Max: 60 * sec}, 1000)
	require.NoError(t, err)
	return p
}

// step is one instant of a walk: a strike, then what Blocked says.
type step struct {
	at      time.Duration
	strike  bool
	blocked time.Duration // 0: not blocked
}

func walk(t *testing.T, p *Penalty, client string, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.strike {
			p.Strike(client, at0(s.at))
		}
		wait, blocked := p.Blocked(client, at0(s.at))
		assert.Equal(t, s.blocked > 0, blocked, "step %d at %v", i, s.at)
		assert.Equal(t, s.blocked, wait, "step %d at %v", i, s.at)
	}
}

func TestPenaltyBackoff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"below the threshold", []step{
			{0, true, 0}, {sec, true, 0}, {30 * sec, false, 0},
		}},
		{"threshold blocks for base", []step{
			{0, true, 0}, {sec, true, 0}, {2 * sec, true, 10 * sec},
			{5 * sec, false, 7 * sec},
			{12*sec - 1, false, 1},
			{12 * sec, false, 0},
		}},
		{"each further strike doubles, capped at max", []step{
			{0, true, 0}, {0, true, 0}, {0, true, 10 * sec},
			{10 * sec, true, 20 * sec},
			{30 * sec, true, 40 * sec},
			{70 * sec, true, 60 * sec},
			{130 * sec, true, 60 * sec},
			{190 * sec, true, 60 * sec},
		}},
		{"strikes while blocked are ignored", []step{
			{0, true, 0}, {0, true, 0}, {0, true, 10 * sec},
			{sec, true, 9 * sec}, {2 * sec, true, 8 * sec},
			{10 * sec, true, 20 * sec},
		}},
		{"strikes older than within decay", []step{
			{0, true, 0}, {30 * sec, true, 0}, {61 * sec, true, 0}, // 0 is 61 s old
			{62 * sec, true, 10 * sec}, // 30, 61, 62
		}},
		{"after decay the block starts at base again", []step{
			{0, true, 0}, {0, true, 0}, {0, true, 10 * sec},
			{10 * sec, true, 20 * sec}, // blocked until 30 s
			// 61 s of unblocked time later, all three strikes have aged out.
			{91 * sec, true, 0},
			{92 * sec, true, 0},
			{93 * sec, true, 10 * sec},
		}},
		{"time blocked does not age strikes", []step{
			{0, true, 0}, {0, true, 0}, {0, true, 10 * sec},
			{10 * sec, true, 20 * sec},
			{30 * sec, true, 40 * sec},
			// Blocked until 70 s: 70 s after the first strike, but only 0 s
			// of it unblocked, so the next strike still doubles.
			{70 * sec, true, 60 * sec},
		}},
		{"a clock that steps back", []step{
			{10 * sec, true, 0}, {5 * sec, true, 0}, {6 * sec, true, 10 * sec},
			{0, false, 10 * sec}, // retry-after never exceeds the block
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			walk(t, newTestPenalty(t), "ip:1.2.3.4", tc.steps)
		})
	}
}

func TestPenaltyClientsIndependent(t *testing.T) {
	p := newTestPenalty(t)
	for range 3 {
		p.Strike("a", t0)
	}
	_, blocked := p.Blocked("a", t0)
	assert.True(t, blocked)
	_, blocked = p.Blocked("b", t0)
	assert.False(t, blocked)
}

func TestPenaltyBoundedMemory(t *testing.T) {
	p, err := NewPenalty(PenaltyConfig{Strikes: 1, Within: sec, Base: sec, Max: sec}, 32)
	require.NoError(t, err)
	p.Strike("first", t0)
	for i := range 10_000 {
		p.Strike(fmt.Sprint("client", i), t0)
	}
	n := 0
	for i := range p.shards {
		n += p.shards[i].lru.Len()
	}
	assert.LessOrEqual(t, n, 32)
	_, blocked := p.Blocked("first", t0)
	assert.False(t, blocked, "the least recent client was forgotten")
}

func TestPenaltyOneStrike(t *testing.T) {
	p, err := NewPenalty(PenaltyConfig{Strikes: 1, Within: sec, Base: sec, Max: 4 * sec}, 1)
	require.NoError(t, err)
	walk(t, p, "c", []step{
		{0, true, sec},
		{sec, true, 2 * sec},
		{3 * sec, true, 4 * sec},
		{7 * sec, true, 4 * sec},
		{20 * sec, true, sec}, // decayed
	})
}

func TestPenaltyHugeMax(t *testing.T) {
	p, err := NewPenalty(PenaltyConfig{Strikes: 1, Within: time.Duration(1 << 62), Base: sec, Max: time.Duration(1<<63 - 1)}, 1)
	require.NoError(t, err)
	now := t0
	var last time.Duration
	for range 100 {
		p.Strike("c", now)
		wait, blocked := p.Blocked("c", now)
		require.True(t, blocked)
		require.GreaterOrEqual(t, wait, last, "no overflow")
		last = wait
		now = now.Add(wait)
		if now.Year() > 2200 {
			break
		}
	}
}

func TestNewPenaltyErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  PenaltyConfig
		max  int
		want string
	}{
		{PenaltyConfig{Strikes: 0, Within: sec, Base: sec, Max: sec}, 1, "rules: penalty.strikes: must be between 1 and 100, got 0"},
		{PenaltyConfig{Strikes: 1, Within: 0, Base: sec, Max: sec}, 1, "rules: penalty.within: must be positive, got 0s"},
		{PenaltyConfig{Strikes: 1, Within: sec, Base: 2 * sec, Max: sec}, 1, "rules: penalty.max: must be at least base (2s), got 1s"},
		{PenaltyConfig{Strikes: 1, Within: sec, Base: sec, Max: sec}, 0, "rules: penalty maxClients must be positive, got 0"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			p, err := NewPenalty(tc.cfg, tc.max)
			assert.Nil(t, p)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

func TestPenaltyConcurrent(t *testing.T) {
	p := newTestPenalty(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c := fmt.Sprint("c", (g*1000+i)%50)
				now := at0(time.Duration(i) * time.Millisecond)
				p.Strike(c, now)
				_, _ = p.Blocked(c, now)
			}
		}()
	}
	wg.Wait()
}
