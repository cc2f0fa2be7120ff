package httpkey_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// allKey returns the key All gives for extractors that return parts.
func allKey(t testing.TB, parts []string) string {
	t.Helper()
	es := make([]httpkey.Extractor, len(parts))
	for i, p := range parts {
		es[i] = constant(p)
	}
	key, err := httpkey.All(es...)(policyRequest(""))
	require.NoError(t, err)
	return key
}

// splitKey recovers the parts of a composite key, written independently of
// the package from its documented escaping: '\' escapes the next byte, an
// unescaped '|' separates parts. ok is false if the key ends in a lone '\'.
func splitKey(key string) (parts []string, ok bool) {
	var cur strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '\\':
			i++
			if i == len(key) {
				return nil, false
			}
			cur.WriteByte(key[i])
		case '|':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String()), true
}

// randomPart returns a short string mostly of separators and escapes.
func randomPart(r *rand.Rand) string {
	const alphabet = `|\|\a:` + "\x00\xff"
	b := make([]byte, r.IntN(7))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// TestAllKeyIsUnambiguous is a property test: for random part lists full of
// separators and escapes, the parts can be recovered from the key. A function
// with a left inverse is injective, so no two different part lists give the
// same key.
func TestAllKeyIsUnambiguous(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		parts := make([]string, 1+r.IntN(5))
		for i := range parts {
			parts[i] = randomPart(r)
		}
		key := allKey(t, parts)
		got, ok := splitKey(key)
		require.True(t, ok, "key %q of %q ends in a lone escape", key, parts)
		require.Equal(t, parts, got, "key %q", key)
	}
}

// TestAllKeyNoCollisionsExhaustive checks injectivity directly on every list
// of one to three parts, each part any string of up to two bytes from 'a',
// '|' and '\'.
func TestAllKeyNoCollisionsExhaustive(t *testing.T) {
	strs := []string{""}
	for _, a := range `a|\` {
		strs = append(strs, string(a))
		for _, b := range `a|\` {
			strs = append(strs, string(a)+string(b))
		}
	}
	lists := [][]string{}
	for _, a := range strs {
		lists = append(lists, []string{a})
		for _, b := range strs {
			lists = append(lists, []string{a, b})
			for _, c := range strs {
				lists = append(lists, []string{a, b, c})
			}
		}
	}
	seen := make(map[string][]string, len(lists))
	for _, parts := range lists {
		key := allKey(t, parts)
		if prev, dup := seen[key]; dup {
			t.Fatalf("%q and %q both give key %q", prev, parts, key)
		}
		seen[key] = parts
	}
	assert.Len(t, seen, len(lists))
}

// TestAllKeyPlainPartsUnchanged checks that parts without '|' or '\' are
// joined as they are, so common keys stay readable.
func TestAllKeyPlainPartsUnchanged(t *testing.T) {
	parts := []string{"ip:2001:db8:1:2::/64", "user:42", "endpoint:GET /x/{id}"}
	assert.Equal(t, strings.Join(parts, "|"), allKey(t, parts))
}
