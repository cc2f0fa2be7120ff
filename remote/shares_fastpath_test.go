package remote_test

// Differential tests of shares.lua's fast path (serveFast)
// against its general path (apply) alone: the same script is loaded twice
// on one redis-server, reading its clock from a key, once as it is and once
// with the fast path disabled; each case writes two identical copies of a
// contest's hash (f:<k> and g:<k>), sends the same call to each script, and
// compares the replies, the resulting hashes byte for byte and the keys'
// expiry times.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

const (
	rvClock   = "fastpath:now"
	rvCounter = "fastpath:fast"
	rvONE     = 32768.0
	rvNow     = 1_800_000_000_000_000.0
)

type rvScripts struct {
	c         *redis.Client
	fast, gen *redis.Script
}

func newRVScripts(t *testing.T) *rvScripts {
	src, err := os.ReadFile("lua/shares.lua")
	require.NoError(t, err)
	s := string(src)
	const timeLines = "local clock = redis.call('TIME')\nlocal now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])\n"
	require.Contains(t, s, timeLines)
	s = strings.Replace(s, timeLines, "local now = tonumber(redis.call('GET', '"+rvClock+"'))\n", 1)
	const loop = "for i = 1, usable and #KEYS or 0 do"
	require.Contains(t, s, loop)
	gen := strings.Replace(s, loop, "for i = 1, 0 do", 1)
	const mark = "  -- answered fast\n"
	require.Contains(t, s, mark)
	fast := strings.ReplaceAll(s, mark, "  redis.call('INCR', '"+rvCounter+"')\n")
	c := redistest.Start(t).Client(t)
	require.NoError(t, c.Set(context.Background(), rvClock, fmt.Sprintf("%.0f", rvNow), 0).Err())
	return &rvScripts{c: c, fast: redis.NewScript(fast), gen: redis.NewScript(gen)}
}

// rvMeta is a contest's header (META).
type rvMeta struct {
	epoch, expiry, pool, ps1, ps2, ps3, ps4, poolAt, joins, callAt, quiet, fails, unknown, unknownUntil,
	exSince, exOK, reserved, held, lapse, ttl float64
}

func (m rvMeta) pack() string {
	return rvPack(m.epoch, m.expiry, m.pool, m.ps1, m.ps2, m.ps3, m.ps4, m.poolAt, m.joins, m.callAt, m.quiet, m.fails,
		m.unknown, m.unknownUntil, m.exSince, m.exOK, m.reserved, m.held, m.lapse, m.ttl)
}

// rvRec is a node's record (REC).
type rvRec struct {
	grant, leaseEnd, growth, gs1, gs2, gs3, gs4, growthAt, seq, outcome, untl, served, servedAt, hold, holdUntil, heard float64
}

func (r rvRec) pack() string {
	return rvPack(r.grant, r.leaseEnd, r.growth, r.gs1, r.gs2, r.gs3, r.gs4, r.growthAt, r.seq, r.outcome, r.untl,
		r.served, r.servedAt, r.hold, r.holdUntil, r.heard)
}

// rvOp is an op's 30 values (OPARGS).
type rvOp struct {
	kind, interval, tolerance, capacity, period, rate, epoch, held, keep, level, window, count, prev, at, want,
	asked, need, fleet, pooled, join, leave, serve, seq, full, shadow, shadowSince, owed, applied, heard, resetHeard float64
}

func (o rvOp) pack() string {
	return rvPack(o.kind, o.interval, o.tolerance, o.capacity, o.period, o.rate, o.epoch, o.held, o.keep, o.level,
		o.window, o.count, o.prev, o.at, o.want, o.asked, o.need, o.fleet, o.pooled, o.join, o.leave, o.serve, o.seq,
		o.full, o.shadow, o.shadowSince, o.owed, o.applied, o.heard, o.resetHeard)
}

func rvPack(vs ...float64) string {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

const rvEpoch = rvNow - 5_000_000

// rvBaseMeta: a token bucket's contest nobody holds any of, its pool full
// since a second ago, created by node b.
func rvBaseMeta() rvMeta {
	return rvMeta{epoch: rvEpoch, expiry: rvNow + 3_000_000, pool: rvONE, poolAt: rvNow - 1_000_000,
		lapse: math.Inf(1), ttl: rvNow + 4_000_000}
}

// rvBaseOp: node a's serve op of one request (each 1) on the contest, limit
// 10 per second (interval 100 ms, burst 10).
func rvBaseOp() rvOp {
	return rvOp{kind: 0, interval: 1e8, tolerance: 1e9, capacity: 10, epoch: rvEpoch, at: rvNow, want: 1,
		asked: rvNow, fleet: 2, pooled: 1, serve: 2, seq: rvNow, full: -1, shadow: -1}
}

// rvHash is a contest's fields (nil values are left out).
type rvHash map[string]string

func rvContest(m rvMeta, xn string, la string, recs map[string]rvRec) rvHash {
	h := rvHash{"m": m.pack()}
	if xn != "" {
		h["xn"] = xn
	}
	if la != "" {
		h["la"] = la
	}
	for id, r := range recs {
		h["r:"+id] = r.pack()
	}
	return h
}

// rvKey is one key of a call: its hash before (nil: none), or a value of
// another type, and its op.
type rvKey struct {
	hash rvHash
	str  string // non-empty: the key is a string
	op   string // the packed op
	same int    // > 0: the same key as the call's key same-1 (its hash and str ignored)
}

type rvSettings struct {
	node                                         string
	lease, window, cooldown, recovery, homeLease float64
	gone                                         []string // node, µs pairs
}

func rvDefaultSettings() rvSettings {
	return rvSettings{node: "a", lease: 1_000_000, window: 40_000, cooldown: 200_000, recovery: 300_000,
		homeLease: 20_000_000}
}

type rvResult struct {
	reply  any
	err    string
	hashes []map[string]string
	expire []int64
	fast   int64
}

func (s *rvScripts) run(t *testing.T, sc *redis.Script, prefix string, set rvSettings, keys []rvKey, now float64) rvResult {
	ctx := context.Background()
	require.NoError(t, s.c.Set(ctx, rvClock, fmt.Sprintf("%.0f", now), 0).Err())
	require.NoError(t, s.c.Del(ctx, rvCounter).Err())
	names := make([]string, len(keys))
	args := []any{set.node, fmt.Sprintf("%.0f", set.lease), fmt.Sprintf("%.0f", set.window), fmt.Sprintf("%.0f", set.cooldown),
		fmt.Sprintf("%.0f", set.recovery), fmt.Sprintf("%.0f", set.homeLease), len(set.gone) / 2}
	for _, g := range set.gone {
		args = append(args, g)
	}
	args = append(args, "") // no channel: the calls answered are published nowhere
	for i := range keys {
		names[i] = fmt.Sprintf("%s:k%d", prefix, i)
		require.NoError(t, s.c.Del(ctx, names[i]).Err())
	}
	for i, k := range keys {
		if k.same > 0 {
			names[i] = names[k.same-1]
		} else if k.str != "" {
			require.NoError(t, s.c.Set(ctx, names[i], k.str, 0).Err())
		} else if len(k.hash) > 0 {
			// fields in a fixed order (m, xn, la, records sorted), as one HSET
			fields := make([]string, 0, len(k.hash))
			for f := range k.hash {
				fields = append(fields, f)
			}
			sort.Slice(fields, func(a, b int) bool { return rvOrder(fields[a]) < rvOrder(fields[b]) })
			var hv []any
			for _, f := range fields {
				hv = append(hv, f, k.hash[f])
			}
			require.NoError(t, s.c.HSet(ctx, names[i], hv...).Err())
			require.NoError(t, s.c.Do(ctx, "PEXPIREAT", names[i], int64(math.Ceil((now+100_000_000)/1000))).Err())
		}
		args = append(args, k.op)
	}
	var res rvResult
	reply, err := sc.Run(ctx, s.c, names, args...).Result()
	res.reply = reply
	if err != nil {
		res.err = err.Error()
	}
	for _, n := range rvUnique(names) {
		typ, err := s.c.Type(ctx, n).Result()
		require.NoError(t, err)
		if typ == "hash" {
			h, err := s.c.HGetAll(ctx, n).Result()
			require.NoError(t, err)
			res.hashes = append(res.hashes, h)
		} else {
			v, _ := s.c.Get(ctx, n).Result()
			res.hashes = append(res.hashes, map[string]string{"<" + typ + ">": v})
		}
		e, err := s.c.Do(ctx, "PEXPIRETIME", n).Int64()
		require.NoError(t, err)
		res.expire = append(res.expire, e)
	}
	res.fast, _ = s.c.Get(ctx, rvCounter).Int64()
	return res
}

func rvUnique(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func rvOrder(f string) string {
	switch f {
	case "m":
		return "0"
	case "xn":
		return "1"
	case "la":
		return "2"
	}
	return "3" + f
}

// compare runs keys through both scripts and returns a description of every
// difference (empty: none) and how many ops the fast path answered.
func (s *rvScripts) compare(t *testing.T, set rvSettings, keys []rvKey, now float64) (string, rvResult, rvResult) {
	f := s.run(t, s.fast, "f", set, keys, now)
	g := s.run(t, s.gen, "g", set, keys, now)
	var diffs []string
	if scriptSHA.ReplaceAllString(f.err, "script: <sha>") != scriptSHA.ReplaceAllString(g.err, "script: <sha>") {
		diffs = append(diffs, fmt.Sprintf("error: fast %q, general %q", f.err, g.err))
	}
	if !reflect.DeepEqual(f.reply, g.reply) {
		diffs = append(diffs, fmt.Sprintf("reply:\n  fast    %v\n  general %v", f.reply, g.reply))
	}
	for i := range f.hashes {
		if i >= len(g.hashes) {
			break
		}
		if !reflect.DeepEqual(f.hashes[i], g.hashes[i]) {
			diffs = append(diffs, fmt.Sprintf("key %d hash:\n%s", i, rvHashDiff(f.hashes[i], g.hashes[i])))
		}
		if f.expire[i] != g.expire[i] {
			diffs = append(diffs, fmt.Sprintf("key %d PEXPIRETIME: fast %d, general %d", i, f.expire[i], g.expire[i]))
		}
	}
	if g.fast != 0 {
		diffs = append(diffs, "the general-only script answered fast")
	}
	return strings.Join(diffs, "\n"), f, g
}

// scriptSHA is a script's name in an error Redis returns: the two scripts'
// differ.
var scriptSHA = regexp.MustCompile(`script: [0-9a-f]{40}`)

func rvHashDiff(f, g map[string]string) string {
	var out []string
	fields := map[string]bool{}
	for k := range f {
		fields[k] = true
	}
	for k := range g {
		fields[k] = true
	}
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if f[k] == g[k] {
			continue
		}
		out = append(out, fmt.Sprintf("  %s:\n    fast    %s\n    general %s", k, rvDecode(k, f[k]), rvDecode(k, g[k])))
	}
	return strings.Join(out, "\n")
}

func rvDecode(field, v string) string {
	if field == "m" || strings.HasPrefix(field, "r:") {
		var vs []string
		for i := 0; i+8 <= len(v); i += 8 {
			x := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[i : i+8])))
			if x == 0 && math.Signbit(x) {
				vs = append(vs, "-0")
			} else {
				vs = append(vs, fmt.Sprintf("%.17g", x))
			}
		}
		return "[" + strings.Join(vs, " ") + "]"
	}
	return fmt.Sprintf("%q", v)
}

// rvOne is a call of one op on one contest.
func rvOne(h rvHash, o rvOp) []rvKey { return []rvKey{{hash: h, op: o.pack()}} }

// la: another node (b) asked last, 1 ms ago: the fast path's home rule
// holds without reading the records.
var rvLaOther = fmt.Sprintf("%.0f b", rvNow-1000)

// TestShareScriptsFastPathAnswersItsCase: the base case is answered by the fast path and
// agrees with the general path.
func TestShareScriptsFastPathAnswersItsCase(t *testing.T) {
	s := newRVScripts(t)
	d, f, _ := s.compare(t, rvDefaultSettings(), rvOne(rvContest(rvBaseMeta(), "b", rvLaOther, nil), rvBaseOp()), rvNow)
	require.Empty(t, d)
	require.Equal(t, int64(1), f.fast, "the fast path answered")
	t.Logf("reply %v", f.reply)
}

func rvPick(r *rand.Rand, xs ...float64) float64 { return xs[r.Intn(len(xs))] }

func rvPickS(r *rand.Rand, xs ...string) string { return xs[r.Intn(len(xs))] }

// rvRandomKey is a contest and an op in the fast path's case, with random
// numbers (pool, its state, the op's want, each, asked, need, seq, the la
// field, the records), and in about a third of the keys one of the fast
// path's conditions broken at random.
func rvRandomKey(r *rand.Rand) rvKey {
	now := rvNow
	m := rvBaseMeta()
	m.expiry = rvPick(r, now+3_000_000, now+1, now+1e9)
	m.pool = rvPick(r, rvONE, rvONE, rvONE, rvONE/2, 1, 0, -100, 2*rvONE, 3, 12345, rvONE-1)
	m.ps1 = rvPick(r, 0, 0, 5e8, 1e9, 1e9-1, 2e9, float64(r.Int63n(3e9)), 1<<53, 1e8, 3e8, 1e9+1)
	m.ps2 = rvPick(r, 0, 0, 0, 7)
	m.poolAt = rvPick(r, now-1_000_000, now-50_000, now-100, now, now+1_000_000, now-10_000_000, now-float64(r.Int63n(2e6)))
	m.callAt = rvPick(r, 0, 0, now-10_000)
	m.quiet = rvPick(r, 0, 0, now+1_000_000)
	m.fails = rvPick(r, 0, 0, 2)
	m.unknownUntil = rvPick(r, 0, now-1, now+1_000_000)
	m.exSince = rvPick(r, 0, now-2_000_000)
	m.exOK = rvPick(r, 0, 0, 1)
	m.lapse = rvPick(r, math.Inf(1), math.Inf(1), now+500_000, now+1)
	m.ttl = rvPick(r, now+4_000_000, now+4_000_000, 0, now+1e9, now+2_000_000)
	xn := rvPickS(r, "b", "b", "", "c")
	la := rvPickS(r, rvLaOther, rvLaOther, rvLaOther, fmt.Sprintf("%.0f c", now+1000),
		fmt.Sprintf("%.0f b", now-10_000_000+1), fmt.Sprintf("%.0f b", now-9_999_999), fmt.Sprintf("%.0f b", now-5_000_000))
	recs := map[string]rvRec{}
	if r.Intn(3) > 0 {
		recs["a"] = rvRec{leaseEnd: rvPick(r, 0, now+500_000, now-10),
			gs1: rvPick(r, 0, 4e8), growth: rvPick(r, 0, 0, 100), growthAt: rvPick(r, 0, now-2_000_000, now-10),
			seq: rvPick(r, now-2_000_000, now-2_000_000, 0, now+2_000_000), outcome: rvPick(r, 0, 3),
			untl: rvPick(r, 0, now+1000), served: rvPick(r, 0, 1), servedAt: rvPick(r, 0, now-2_000_000),
			holdUntil: rvPick(r, 0, now+300_000)}
	}
	if r.Intn(2) > 0 {
		recs["b"] = rvRec{leaseEnd: rvPick(r, now+500_000, now-10),
			growthAt: rvPick(r, now-2_000_000, now-1000), seq: now - 1000, outcome: rvPick(r, 0, 3),
			served: rvPick(r, 0, 1)}
	}
	o := rvBaseOp()
	o.interval = rvPick(r, 1e8, 1e8, 1e8, 1, 1<<26, 1e6)
	o.capacity = rvPick(r, 10, 10, 1, 1<<20, 3)
	o.tolerance = o.interval * o.capacity
	o.level = rvPick(r, 0, 5e8)
	o.want = rvPick(r, 1, 1, 1, 2, 3, 10, 11, 1e6, 7, 4, 9)
	o.asked = rvPick(r, now, now, now-100_000, now-2_000_000, now+1_000_000, 0, now-30_000, now-float64(r.Int63n(1e6)))
	o.need = rvPick(r, 0, 0, rvONE, 1)
	o.fleet = rvPick(r, 1, 2, 2, 3)
	o.pooled = rvPick(r, 1, 1, 1, 0)
	o.serve = rvPick(r, 2, 2, 2, 1, 3, 4, 5, 12)
	o.seq = rvPick(r, now, now, now, 0, now-2_000_000+1)
	o.shadow = rvPick(r, -1, -1, 0, 3e8)
	o.shadowSince = rvPick(r, 0, now-3_000_000)
	o.applied = rvPick(r, 0, 0, 0, now-2_000_000, now-3_000_000)
	if r.Intn(3) == 0 {
		// break one condition
		switch r.Intn(24) {
		case 0:
			m.epoch = rvEpoch - 1
		case 1:
			m.expiry = rvPick(r, now, now-1)
		case 2:
			m.joins = 1
		case 3:
			m.unknown = 100
		case 4:
			m.reserved = 100
		case 5:
			m.held, recs["b"] = rvONE/2, rvRec{grant: rvONE / 2, leaseEnd: rvPick(r, now+500_000, now-10), growthAt: now - 1000, seq: now - 1000}
			m.lapse = recs["b"].leaseEnd
		case 6:
			m.lapse = rvPick(r, now, now-1)
		case 7:
			xn = "a"
		case 8:
			la = rvPickS(r, "", fmt.Sprintf("%.0f a", now-1000), fmt.Sprintf("%.0f b", now-15_000_000), fmt.Sprintf("%.0f b", now-10_000_000), "garbage")
		case 9:
			a := recs["a"]
			a.seq = rvPick(r, now, now+10, now-10)
			recs["a"] = a
		case 10:
			a := recs["a"]
			a.grant, a.hold = rvPick(r, 0, rvONE/2), rvPick(r, 0, 100)
			a.leaseEnd, a.holdUntil = now+500_000, now+300_000
			recs["a"] = a
			m.held = a.grant + a.hold
			m.lapse = now + 300_000
		case 11:
			o.applied = rvPick(r, now+1, now-1_000_000)
		case 12:
			o.kind = rvPick(r, 1, 3)
			if o.kind == 1 {
				o.period, o.rate = 1_000_000, 10
			}
		case 13:
			o.epoch = rvPick(r, 0, rvEpoch-1)
		case 14:
			o.held = rvPick(r, rvONE/2, -1)
		case 15:
			o.keep = rvPick(r, 1, -1)
		case 16:
			o.want = rvPick(r, 0, -1)
		case 17:
			o.leave = 1
		case 18:
			o.serve = 0
		case 19:
			o.owed = 1
		case 20:
			if r.Intn(2) == 0 {
				return rvKey{op: o.pack()} // no contest
			}
			h := rvContest(m, xn, la, recs)
			h["m"] = h["m"][:17*8] // an earlier release's
			return rvKey{hash: h, op: o.pack()}
		case 21:
			return rvKey{str: "x", op: o.pack()} // WRONGTYPE
		case 22:
			// No contest, and a node that names none: its first request
			// makes it (shadow, pooled, want, need and asked at random).
			o.epoch = 0
			return rvKey{op: o.pack()}
		case 23:
			// A hash holding a record and la but no header: no contest.
			o.epoch = 0
			h := rvContest(m, xn, la, recs)
			delete(h, "m")
			if len(h) == 0 {
				return rvKey{op: o.pack()}
			}
			return rvKey{hash: h, op: o.pack()}
		}
	}
	return rvKey{hash: rvContest(m, xn, la, recs), op: o.pack()}
}

// TestShareScriptsFastPathAgreesOnRandomOps: random contests and ops around the fast path's
// case, one op a call and calls of several keys, each through both
// scripts.
func TestShareScriptsFastPathAgreesOnRandomOps(t *testing.T) {
	s := newRVScripts(t)
	r := rand.New(rand.NewSource(1))
	fast, calls, ops, bad := int64(0), 0, 0, 0
	stats := map[string]int{}
	for i := 0; i < 2000; i++ {
		n := 1
		if i%3 == 0 {
			n = 2 + r.Intn(4)
		}
		keys := make([]rvKey, n)
		for j := range keys {
			keys[j] = rvRandomKey(r)
		}
		set := rvDefaultSettings()
		if r.Intn(4) == 0 {
			set.gone = []string{"b", fmt.Sprintf("%.0f", rvNow-rvPick(r, 500_000.0, 3_000_000.0))}
		}
		if r.Intn(5) == 0 {
			set.homeLease = rvPick(r, 0.0, 1_000_000, 500_000)
		}
		d, f, _ := s.compare(t, set, keys, rvNow)
		fast += f.fast
		if n == 1 && f.fast == 1 {
			v := f.reply.([]any)
			outcome, served, exact := v[2].(int64), v[16].(int64), v[19].(int64)
			stats[fmt.Sprintf("outcome=%d served>0=%v exact=%d", outcome, served > 0, exact)]++
		}
		calls++
		ops += n
		if d != "" {
			bad++
			if bad <= 5 {
				t.Errorf("call %d (%d keys): %s", i, n, d)
			}
		}
	}
	t.Logf("%d calls, %d ops, %d answered by the fast path, %d calls differed; one-op calls answered fast: %v", calls, ops, fast, bad, stats)
}

// rvEdges are TestShareScriptsFastPathAgreesOnEdges's cases.
func rvEdges() []rvEdge {
	nan := math.NaN()
	base := func() (rvMeta, rvOp) { return rvBaseMeta(), rvBaseOp() }
	return []rvEdge{
		{"a contest expiring past what PEXPIREAT takes, seq set", func() []rvKey {
			m, o := base()
			m.expiry = 1e25 // the general path writes, then fails at PEXPIREAT
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"a contest expiring past what PEXPIREAT takes, seq 0", func() []rvKey {
			m, o := base()
			m.expiry = 1e25
			o.seq = 0
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"an expiry of 1e20 µs (PEXPIREAT 1e17 ms), seq 0", func() []rvKey {
			m, o := base()
			m.expiry = 1e20
			o.seq = 0
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"an expiry of 9e19 µs, seq 0", func() []rvKey {
			m, o := base()
			m.expiry = 9e19
			o.seq = 0
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"an infinite expiry, seq 0", func() []rvKey {
			m, o := base()
			m.expiry = math.Inf(1)
			o.seq = 0
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"want NaN", func() []rvKey {
			m, o := base()
			o.want = nan
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"serve NaN", func() []rvKey {
			m, o := base()
			o.serve = nan
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"la's time nan, a home to make", func() []rvKey {
			m, o := base()
			o.need = rvONE
			return rvOne(rvContest(m, "b", "nan b", nil), o)
		}},
		{"the pool's level NaN", func() []rvKey {
			m, o := base()
			m.ps1 = nan
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"tolerance NaN", func() []rvKey {
			m, o := base()
			o.tolerance = nan
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"exOK 2, no room", func() []rvKey {
			m, o := base()
			m.exOK, m.ps1, m.poolAt = 2, 1e9, rvNow // the pool wholly spent now: no room, not served
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"an op's argument short, then a fast op", func() []rvKey {
			m, o := base()
			return []rvKey{{hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()[:100]},
				{hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()}}
		}},
		{"a key of another type, then a fast op", func() []rvKey {
			m, o := base()
			return []rvKey{{str: "x", op: o.pack()}, {hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()}}
		}},
		{"la's time not a number, a home to make", func() []rvKey {
			m, o := base()
			o.need = rvONE
			return []rvKey{{hash: rvContest(m, "b", "12x b", nil), op: o.pack()}, {hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()}}
		}},
		{"a record too short", func() []rvKey {
			m, o := base()
			h := rvContest(m, "b", rvLaOther, nil)
			h["r:a"] = "short"
			return rvOne(h, o)
		}},
		{"a header of 168 bytes", func() []rvKey {
			m, o := base()
			h := rvContest(m, "b", rvLaOther, nil)
			h["m"] += rvPack(1)
			return rvOne(h, o)
		}},
		{"values near 2^53", func() []rvKey {
			m, o := base()
			m.ps1, m.poolAt = 1<<53-1, rvNow-1
			o.interval, o.capacity = 1<<26, 1<<26
			o.tolerance = 1 << 52
			o.want = 1 << 25
			o.serve = 1 + 1<<20
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"want larger than capacity, partial", func() []rvKey {
			m, o := base()
			o.want, o.serve = 25, 2
			m.ps1 = 3e8
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"asked in the future", func() []rvKey {
			m, o := base()
			o.asked = rvNow + 5_000_000
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"poolAt in the future", func() []rvKey {
			m, o := base()
			m.poolAt = rvNow + 5_000_000
			m.ps1 = 9e8
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"la exactly half a home lease ago", func() []rvKey {
			m, o := base()
			o.need = rvONE
			return rvOne(rvContest(m, "b", fmt.Sprintf("%.0f b", rvNow-10_000_000), nil), o)
		}},
		{"la one µs within half a home lease", func() []rvKey {
			m, o := base()
			o.need = rvONE
			return rvOne(rvContest(m, "b", fmt.Sprintf("%.0f b", rvNow-9_999_999), nil), o)
		}},
		{"exOK 2, served", func() []rvKey {
			m, o := base()
			m.exOK = 2
			return rvOne(rvContest(m, "b", rvLaOther, nil), o)
		}},
		{"a key named twice (the fast path stays out)", func() []rvKey {
			m, o := base()
			return []rvKey{{hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()}, {hash: rvContest(m, "b", rvLaOther, nil), op: o.pack()},
				{same: 1, op: o.pack()}}
		}},
		{"a departure known, nobody holding (b gone, see below)", func() []rvKey {
			m, o := base()
			m.lapse = rvNow + 500_000
			return rvOne(rvContest(m, "b", rvLaOther, map[string]rvRec{"b": {growthAt: rvNow - 2_000_000, leaseEnd: rvNow + 500_000, seq: 1}}), o)
		}},
		{"la with a node name holding a space", func() []rvKey {
			m, o := base()
			o.need = rvONE
			return rvOne(rvContest(m, "b", fmt.Sprintf("%.0f b c", rvNow-1), nil), o)
		}},
	}
}

type rvEdge struct {
	name string
	keys func() []rvKey
}

// TestShareScriptsFastPathAgreesOnEdges: single cases at the fast path's
// edges, each held to the general path alone (a failure prints the
// difference). Among them the ones a review found to differ, since fixed: a
// write the fast path made before a command failed (an expiry past what
// PEXPIREAT takes) applied again by the general path; an op's argument the
// general path cannot read after one the fast path answered; values that
// are not numbers (NaN) compared otherwise than the general path compares
// them. (A stored -0 is left out: Go sends int64 values, which are never
// -0, and the two paths write such a zero with different signs.)
func TestShareScriptsFastPathAgreesOnEdges(t *testing.T) {
	s := newRVScripts(t)
	for _, tc := range rvEdges() {
		t.Run(tc.name, func(t *testing.T) {
			set := rvDefaultSettings()
			if strings.Contains(tc.name, "b gone") {
				set.gone = []string{"b", fmt.Sprintf("%.0f", rvNow-1_000_000)}
			}
			d, f, g := s.compare(t, set, tc.keys(), rvNow)
			t.Logf("fast path answered %d op(s)", f.fast)
			if d != "" {
				t.Errorf("fast and general paths differ:\n%s", d)
			} else {
				t.Logf("agree: reply %v err %q", g.reply, g.err)
			}
		})
	}
}

// rvField reads value i of a packed field (0 when absent).
func rvField(v string, i int) float64 {
	if len(v) < 8*(i+1) {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i : 8*i+8])))
}

// TestShareScriptsFastPathAgreesOverAContestsLife: one contest's life through both scripts,
// op after op from three nodes on an advancing clock, each op built from
// the state the node would know (its grant, the contest's epoch), the
// hashes carried forward (not rebuilt) and compared after every op.
func TestShareScriptsFastPathAgreesOverAContestsLife(t *testing.T) {
	s := newRVScripts(t)
	ctx := context.Background()
	fast, steps := int64(0), 0
	for seed := int64(1); seed <= 15; seed++ {
		r := rand.New(rand.NewSource(seed))
		now := rvNow
		fk, gk := "f:seq", "g:seq"
		require.NoError(t, s.c.Del(ctx, fk, gk).Err())
		interval := rvPick(r, 1e8, 1e7, 1e6)
		capacity := rvPick(r, 1, 2, 10)
		for step := 0; step < 150; step++ {
			now += float64(r.Int63n(int64(rvPick(r, 1000, 50_000, 300_000, 2_000_000))))
			node := rvPickS(r, "a", "b", "c")
			set := rvDefaultSettings()
			set.node = node
			if r.Intn(8) == 0 {
				set.gone = []string{rvPickS(r, "a", "b", "c"), fmt.Sprintf("%.0f", now-rvPick(r, 100_000, 2_000_000))}
			}
			h, err := s.c.HGetAll(ctx, gk).Result()
			require.NoError(t, err)
			o := rvBaseOp()
			o.interval, o.capacity, o.tolerance = interval, capacity, interval*capacity
			o.epoch = rvField(h["m"], 0)
			grant := rvField(h["r:"+node], 0)
			o.held, o.keep = grant, rvPick(r, 0, 0, grant)
			o.want = rvPick(r, 1, 1, 1, 2, 3, 0)
			o.serve = rvPick(r, 2, 2, 2, 0, 3, 1)
			o.need = rvPick(r, 0, 0, rvONE)
			o.asked = now - rvPick(r, 0, 0, 30_000, 200_000)
			o.at, o.seq = now, now
			o.fleet = 3
			if r.Intn(20) == 0 {
				o.epoch, o.held, o.keep = 0, 0, 0
			}
			// the step's op on each copy, from its current state
			var res [2]rvResult
			for i, sc := range []*redis.Script{s.fast, s.gen} {
				key := []string{fk, gk}[i]
				require.NoError(t, s.c.Set(ctx, rvClock, fmt.Sprintf("%.0f", now), 0).Err())
				require.NoError(t, s.c.Del(ctx, rvCounter).Err())
				args := []any{set.node, "1000000", "40000", "200000", "300000", "20000000", len(set.gone) / 2}
				for _, g := range set.gone {
					args = append(args, g)
				}
				args = append(args, "", o.pack()) // no channel
				reply, err := sc.Run(ctx, s.c, []string{key}, args...).Result()
				if err != nil {
					res[i].err = err.Error()
				}
				res[i].reply = reply
				hh, err := s.c.HGetAll(ctx, key).Result()
				require.NoError(t, err)
				res[i].hashes = []map[string]string{hh}
				e, err := s.c.Do(ctx, "PEXPIRETIME", key).Int64()
				require.NoError(t, err)
				res[i].expire = []int64{e}
				res[i].fast, _ = s.c.Get(ctx, rvCounter).Int64()
			}
			fast += res[0].fast
			steps++
			if !reflect.DeepEqual(res[0].reply, res[1].reply) || !reflect.DeepEqual(res[0].hashes, res[1].hashes) ||
				res[0].expire[0] != res[1].expire[0] {
				t.Fatalf("seed %d step %d node %s: differ\nreply fast %v\nreply gen  %v\n%s", seed, step, node,
					res[0].reply, res[1].reply, rvHashDiff(res[0].hashes[0], res[1].hashes[0]))
			}
			if r.Intn(60) == 0 {
				require.NoError(t, s.c.Del(ctx, fk, gk).Err())
			}
		}
	}
	t.Logf("%d steps agreed, %d answered by the fast path", steps, fast)
}
