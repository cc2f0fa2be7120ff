package httpkey

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// scanned is one element forwardedScanner returned.
type scanned struct {
	value string
	ok    bool
}

// scanAll returns what forwardedScanner reads from s, nearest element first.
func scanAll(s string) []scanned {
	var out []scanned
	sc := newForwardedScanner(s)
	for {
		v, ok, more := sc.next()
		if !more {
			return out
		}
		out = append(out, scanned{v, ok})
	}
}

func TestForwardedScanner(t *testing.T) {
	bad := scanned{}
	tests := []struct {
		in   string
		want []scanned
	}{
		{"", nil},
		{" , ,", nil},
		{"for=a", []scanned{{"a", true}}},
		{"for=a, for=b", []scanned{{"b", true}, {"a", true}}},
		{"for=a,for=b", []scanned{{"b", true}, {"a", true}}},
		{`for="[2001:db8::1]:80"`, []scanned{{"[2001:db8::1]:80", true}}},
		{`for=[2001:db8::1]:80`, []scanned{{"[2001:db8::1]:80", true}}},
		{"proto=https;for=a;by=b", []scanned{{"a", true}}},
		{"For=a", []scanned{{"a", true}}},
		{";for=a;", []scanned{{"a", true}}},
		{"for=a ; by=b", []scanned{{"a", true}}},
		{`for=a;x="q,\"u;o=te\\"`, []scanned{{"a", true}}},
		{`x="\\\\"; for=a`, []scanned{{"a", true}}},
		{"for=a, by=b", []scanned{bad}},
		{"for=a;for=b", []scanned{bad}},
		{"for=a, for=", []scanned{bad}},
		{"for=a, =b", []scanned{bad}},
		{"for=a, for =b", []scanned{bad}},
		{"for=a, for= b", []scanned{bad}},
		{"for=a, b", []scanned{bad}},
		{`for=a, for=x"b"`, []scanned{bad}},
		{`for=a, for="b`, []scanned{bad}},
		{`for=a, for=b"`, []scanned{bad}},
		{`for=a, for="b\"`, []scanned{bad}},
		{`for=a, for="\b"`, []scanned{bad}},
		{`for="a, for=b`, []scanned{{"b", true}, bad}},
		{"garbage, for=b", []scanned{{"b", true}, bad}},
		{"for=a, for=b c", []scanned{bad}},
		{"for=a, x=b for=c", []scanned{bad}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, scanAll(tt.in))
		})
	}
}

func TestParseNode(t *testing.T) {
	tests := []struct {
		in     string
		syntax nodeSyntax
		want   string // "" when refused
	}{
		{"192.0.2.1", 0, "192.0.2.1"},
		{"192.0.2.1:80", 0, "192.0.2.1"},
		{"192.0.2.1:65535", 0, "192.0.2.1"},
		{"192.0.2.1:65536", 0, ""},
		{"192.0.2.1:080", 0, "192.0.2.1"},
		{"192.0.2.1:123456", 0, ""},
		{"192.0.2.1:", 0, ""},
		{"192.0.2.1:x", 0, ""},
		{"192.0.2.1:_x", 0, ""},
		{"192.0.2.1:_x", obfPortOK, "192.0.2.1"},
		{"192.0.2.1:_", obfPortOK, ""},
		{"192.0.2.1:_x/", obfPortOK, ""},
		{"[2001:db8::1]", 0, "2001:db8::1"},
		{"[2001:db8::1]:443", 0, "2001:db8::1"},
		{"[2001:db8::1]:", 0, ""},
		{"[2001:db8::1]x", 0, ""},
		{"[2001:db8::1", 0, ""},
		{"[192.0.2.1]", 0, ""},
		{"[::ffff:192.0.2.1]", 0, "192.0.2.1"},
		{"2001:db8::1", 0, "2001:db8::1"},
		{"2001:db8::1:80", 0, "2001:db8::1:80"},
		{"::ffff:192.0.2.1", 0, "192.0.2.1"},
		{"::ffff:192.0.2.1:80", 0, ""},
		{"fe80::1%eth0", 0, ""},
		{"fe80::1%eth0", zoneOK, "fe80::1"},
		{"[fe80::1%eth0]:80", zoneOK, "fe80::1"},
		{"unknown", obfPortOK, ""},
		{"_hidden", obfPortOK, ""},
		{"", 0, ""},
		{"@", 0, ""},
		{"01.2.3.4", 0, ""},
		{"1.2.3", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseNode(tt.in, tt.syntax)
			if tt.want == "" {
				assert.False(t, ok, "got %v", got)
				return
			}
			assert.True(t, ok)
			assert.Equal(t, tt.want, got.String())
		})
	}
}

func TestIsTchar(t *testing.T) {
	for c := range 256 {
		want := c < 128 && (isAlnum(byte(c)) || strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0)
		assert.Equal(t, want, isTchar(byte(c)), "byte %#02x", c)
	}
}
