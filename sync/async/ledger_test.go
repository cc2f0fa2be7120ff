package async

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// A total Redis acknowledged is sent again whole when the node flushes: a
// Redis that lost it (a failover to a replica the write had not reached)
// takes it again, and the flush sends each total once.
func TestLedgerFlushSendsAcknowledgedTotalsAgain(t *testing.T) {
	lim := limit.Limit{Rate: 10, Period: time.Second, Algorithm: limit.TokenBucket}
	l := newLedger(10)
	now := time.Unix(1_700_000_000, 0)
	l.add("a", lim, 7, now)
	sent := l.entries(0, false)
	require.Len(t, sent, 1)
	assert.Zero(t, l.acked(sent, make([]error, len(sent))))
	assert.Empty(t, l.entries(0, false), "acknowledged: nothing owed between flushes")

	l.beginFlush()
	again := l.entries(0, true)
	require.Len(t, again, 1, "the acknowledged total goes again when flushing")
	assert.Equal(t, sent[0].Epoch, again[0].Epoch, "in its epoch: Redis adds only what it lacks")
	assert.Equal(t, int64(7), again[0].Total)
	assert.Zero(t, l.acked(again, make([]error, len(again))))
	assert.Empty(t, l.entries(0, true), "once a flush")
}

// Acknowledged totals make room for a new key when the ledger is full; a
// total still owed never does.
func TestLedgerFullForgetsAcknowledgedTotalsFirst(t *testing.T) {
	lim := limit.Limit{Rate: 10, Period: time.Second, Algorithm: limit.TokenBucket}
	l := newLedger(2)
	now := time.Unix(1_700_000_000, 0)
	l.add("a", lim, 1, now)
	sent := l.entries(0, false)
	l.acked(sent, make([]error, len(sent)))
	l.add("b", lim, 1, now)
	assert.Zero(t, l.add("c", lim, 1, now), "a's acknowledged total made room")
	assert.Equal(t, int64(1), l.add("d", lim, 1, now), "b and c are owed: d's weight is dropped")
}
