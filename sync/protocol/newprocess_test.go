package protocol_test

// A new process under a node's name whose ops are numbered below the old
// process's last one (Redis's clock stepped back less than a second, a
// failover to a replica behind) is taken for a late copy of an earlier op.
// It was answered with the old process's last answer, and admitted its
// waiter on the old Served (found in review); it is answered Wait now, with
// nothing served, and asks again with a later seq.

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/share"
	"github.com/hybridlimit/hybridlimit/sync/protocol"
)

func TestANewProcessDoesNotAdmitOnTheOldProcesssServed(t *testing.T) {
	for _, tc := range []struct {
		name, second string
	}{{"another name", "b"}, {"the same name", "a"}} {
		t.Run(tc.name, func(t *testing.T) {
			key, lim := "k", limit.Per(1, time.Second) // burst 1: one request a second
			m := storemodel.New(share.Duration(10 * time.Second))
			start := time.Unix(1_800_000_000, 0).UnixNano()
			admitted := 0
			// ask runs one process of node id at now (ns, its mapping of
			// Redis's clock, which is the store's): one request.
			ask := func(id string, now int64) protocol.Verdict {
				eng := newEngine(t)
				s := protocol.New(protocol.Config{Interval: testInterval, AskWait: time.Second}, eng)
				s.BeatDone(s.NextBeat(now), &share.BeatReply{Now: share.Micros(now), Nodes: 2}, nil, now)
				if _, err := eng.AllowN(now, key, lim, 1); err == nil {
					admitted++
					return protocol.Admitted
				} else if !errors.Is(err, local.ErrShort) {
					t.Fatal(err)
				}
				w, refuse, _ := s.Short(now, now, key, lim, 1, now+int64(time.Second), nil)
				if refuse {
					return protocol.Verdict(0)
				}
				for range 10 {
					ops := s.NextOps(now, 0)
					if len(ops) == 0 {
						break
					}
					replies := make([]share.Reply, len(ops))
					for i, op := range ops {
						replies[i] = m.Op(share.Micros(now), id, s.Settings(), op)
						t.Logf("%s op seq %d want %d -> %v served %d (seq in the record: %d)", id, op.Seq, op.Want, replies[i].Outcome, replies[i].Served,
							m.Hash(share.Micros(now), key, lim).Records[id].Seq)
					}
					s.OpsDone(ops, replies, nil, false, now)
					now += int64(time.Millisecond)
					s.Tick(now)
				}
				v, _ := w.Verdict()
				if v == protocol.Admitted {
					admitted++
				}
				return v
			}
			ask("a", start)
			// 300 ms on, Redis's clock reads 500 ms less (a failover to a
			// replica behind); a process starts as tc.second and asks.
			ask(tc.second, start+int64(300*time.Millisecond)-int64(500*time.Millisecond))
			if admitted > 1 {
				t.Errorf("%d requests admitted within 300 ms under a limit of 1 a second", admitted)
			}
		})
	}
}
