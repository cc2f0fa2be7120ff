package httpkey

import "strings"

// forwardedScanner reads the elements of one Forwarded field value (RFC 7239
// section 4) from right to left, returning each element's "for" value.
//
// Right to left, because the rightmost elements were written by the proxies
// nearest to us, the ones we trust, and whatever a client wrote further left
// must not change how they are read: a client that opens a quoted string it
// never closes would, read left to right, swallow the elements our proxies
// appended. Read right to left, each element ends where its writer ended it.
// Quoted strings are still found exactly: a '"' preceded by an odd run of
// backslashes is escaped, an even run (or none) is not.
//
// The zero value has nothing to read; build one with newForwardedScanner.
type forwardedScanner struct {
	s string
	i int // s[:i] is still to be read
}

func newForwardedScanner(s string) forwardedScanner { return forwardedScanner{s: s, i: len(s)} }

// next returns the "for" value of the next element to the left, raw: an
// unquoted token, or the contents of a quoted string. more is false when no
// element is left (empty elements, as in "a, , b", are skipped). ok is false
// when the element is malformed: a syntax error, no "for" or two of them, or
// a quoted "for" value holding a backslash (a quoted-pair, which no address
// needs). After a malformed element the scanner has nothing more to read:
// nothing to its left can be located with certainty.
func (sc *forwardedScanner) next() (forValue string, ok, more bool) {
	s, i := sc.s, skipSpaceLeft(sc.s, sc.i)
	for i > 0 && s[i-1] == ',' {
		i = skipSpaceLeft(s, i-1)
	}
	if i == 0 {
		sc.i = 0
		return "", false, false
	}
	sc.i = 0 // until the element proves well formed
	found := false
	for {
		// One forwarded-pair (token "=" value) ending at i, or none.
		if c := s[i-1]; c != ';' && c != ',' {
			var value string
			escaped := false
			if c == '"' {
				open := openingQuote(s, i-1)
				if open < 0 {
					return "", false, true
				}
				value, i = s[open+1:i-1], open
				escaped = strings.IndexByte(value, '\\') >= 0
			} else {
				j := i
				for j > 0 && !endsUnquotedValue(s[j-1]) {
					j--
				}
				value, i = s[j:i], j
				if value == "" {
					return "", false, true
				}
			}
			if i == 0 || s[i-1] != '=' {
				return "", false, true
			}
			j := i - 1
			for j > 0 && isTchar(s[j-1]) {
				j--
			}
			name := s[j : i-1]
			if name == "" {
				return "", false, true
			}
			i = skipSpaceLeft(s, j)
			if strings.EqualFold(name, "for") {
				if found || escaped {
					return "", false, true
				}
				found, forValue = true, value
			}
		}
		if i == 0 {
			break
		}
		c := s[i-1]
		i = skipSpaceLeft(s, i-1)
		if c == ',' {
			break
		}
		if c != ';' {
			return "", false, true
		}
		if i == 0 {
			break
		}
	}
	if !found {
		return "", false, true
	}
	sc.i = i
	return forValue, true, true
}

// openingQuote returns the index of the '"' that opens the quoted string
// closed by the '"' at s[end], or -1 if there is none or s[end] is itself
// escaped.
func openingQuote(s string, end int) int {
	if backslashesBefore(s, end)%2 == 1 {
		return -1
	}
	for j := end - 1; j >= 0; j-- {
		if s[j] == '"' {
			n := backslashesBefore(s, j)
			if n%2 == 0 {
				return j
			}
			j -= n
		}
	}
	return -1
}

// backslashesBefore counts the backslashes immediately before s[i].
func backslashesBefore(s string, i int) int {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		n++
		i--
	}
	return n
}

// skipSpaceLeft returns i moved left past spaces and tabs before it.
func skipSpaceLeft(s string, i int) int {
	for i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
		i--
	}
	return i
}

// endsUnquotedValue reports whether c cannot be part of an unquoted value.
// Unquoted values are read leniently ("for=[2001:db8::1]:80" is accepted
// though RFC 7239 wants it quoted): parseNode decides what is an address.
func endsUnquotedValue(c byte) bool {
	return c == '=' || c == ';' || c == ',' || c == '"' || c == ' ' || c == '\t'
}

// isTchar reports whether c may appear in an RFC 9110 token: a letter, a
// digit or one of !#$%&'*+-.^_`|~ (the bits of tcharLo and tcharHi).
func isTchar(c byte) bool {
	const (
		tcharLo = 0x03ff6cfa00000000 // bytes 0 to 63
		tcharHi = 0x57ffffffc7fffffe // bytes 64 to 127
	)
	switch {
	case c < 64:
		return tcharLo&(1<<c) != 0
	case c < 128:
		return tcharHi&(1<<(c-64)) != 0
	}
	return false
}
