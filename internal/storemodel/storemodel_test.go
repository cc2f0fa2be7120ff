package storemodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// A contest the store lost (Redis restarted empty) is rebuilt from what
// each node says it holds, believed: one node held a grant of half the
// limit, the two others decided degraded in an even split of a third each.
// The shares then add up to more than the limit and the pool owes the
// difference. The node above its even split pays that debt on its next op;
// before it did, its renewals kept the fleet over the limit for good (a
// fleet of 3 admitted 350 a second of a 300 limit after Redis came back).
func TestAPoolInDebtIsPaidByTheNodeAboveItsEvenSplit(t *testing.T) {
	m := New(1_000_000)
	set := share.Settings{Lease: 1_000_000, CallWindow: 20_000, Cooldown: 100_000, Recovery: 300_000}
	lim := limit.PerSecond(300)
	third := share.Even(3)
	now := int64(1_800_000_000_000_000)
	op := func(node string, epoch, held, seq, applied int64) share.Reply {
		return m.Op(now, node, set, share.Op{Key: "k", Limit: lim, Epoch: epoch, Held: held, Keep: held,
			At: now, Fleet: 3, Seq: seq, Applied: applied})
	}
	oldEpoch := now - 5_000_000
	a := op("a", oldEpoch, share.One/2, 1, 0)
	require.True(t, a.Lost, "the store had lost the contest")
	op("b", oldEpoch, third, 1, 0)
	op("c", oldEpoch, third, 1, 0)
	h := m.Hash(now, "k", lim)
	require.NotNil(t, h)
	require.Negative(t, h.Pool, "three nodes believed: the pool owes share")

	now += 10_000
	again := op("a", a.Epoch, share.One/2, 2, 1)
	assert.Equal(t, third, again.Grant, "a pays the debt from what it held above its even split")
	h = m.Hash(now, "k", lim)
	assert.LessOrEqual(t, h.Pool+h.Unknown+h.Reserved+granted(h), int64(share.One)+1, "the shares add up to the limit again")
	assert.GreaterOrEqual(t, h.Pool, int64(-1))
}
