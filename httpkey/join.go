package httpkey

import "strings"

// Composite keys: parts joined by partSep, with every partEscape and partSep
// inside a part preceded by partEscape. Read left to right, an unescaped
// partSep always ends a part, so the parts can be recovered from the key: the
// join is injective.
const (
	partSep    = '|'
	partEscape = '\\'
)

// joinParts joins parts into one key, escaping each.
func joinParts(parts []string) string {
	n := len(parts) - 1
	for _, p := range parts {
		n += len(p) + strings.Count(p, string(partSep)) + strings.Count(p, string(partEscape))
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(partSep)
		}
		start := 0
		for j := 0; j < len(p); j++ {
			if c := p[j]; c == partSep || c == partEscape {
				b.WriteString(p[start:j])
				b.WriteByte(partEscape)
				start = j // the byte itself is written with the next run
			}
		}
		b.WriteString(p[start:])
	}
	return b.String()
}
