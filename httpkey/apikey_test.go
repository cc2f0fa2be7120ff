package httpkey_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

func TestAPIKey(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	sum := sha256.Sum256([]byte(secret))
	hashed := "keyhash:" + hex.EncodeToString(sum[:16])

	tests := []struct {
		name    string
		cfg     httpkey.APIKeyConfig
		headers []header
		want    string
		wantErr error  // errors.Is target; nil with wantSub means any error
		wantSub string // in the error message
	}{
		{name: "present", headers: []header{{"X-API-Key", secret}}, want: "key:" + secret},
		{name: "header name in any case", headers: []header{{"x-api-key", secret}}, want: "key:" + secret},
		{name: "surrounding white space trimmed", headers: []header{{"X-API-Key", " \t" + secret + " "}}, want: "key:" + secret},
		{name: "inner space and separators kept", headers: []header{{"X-API-Key", `a b|c\d`}}, want: `key:a b|c\d`},
		{name: "custom header", cfg: httpkey.APIKeyConfig{Header: "authorization-key"}, headers: []header{{"Authorization-Key", secret}}, want: "key:" + secret},
		{name: "hashed", cfg: httpkey.APIKeyConfig{Hash: true}, headers: []header{{"X-API-Key", secret}}, want: hashed},
		{name: "exactly the default bound", headers: []header{{"X-API-Key", strings.Repeat("k", httpkey.DefaultAPIKeyMaxLen)}}, want: "key:" + strings.Repeat("k", httpkey.DefaultAPIKeyMaxLen)},

		{name: "missing", wantErr: httpkey.ErrNoKey, wantSub: "no X-API-Key header"},
		{name: "empty", headers: []header{{"X-API-Key", "  "}}, wantErr: httpkey.ErrNoKey},
		{name: "other header only", cfg: httpkey.APIKeyConfig{Header: "X-Token"}, headers: []header{{"X-API-Key", secret}}, wantErr: httpkey.ErrNoKey, wantSub: "no X-Token header"},
		{name: "too long for the default", headers: []header{{"X-API-Key", strings.Repeat("k", httpkey.DefaultAPIKeyMaxLen+1)}}, wantErr: httpkey.ErrMalformed, wantSub: "X-API-Key is 257 bytes, longer than 256"},
		{name: "too long for MaxLen", cfg: httpkey.APIKeyConfig{MaxLen: 8, Hash: true}, headers: []header{{"X-API-Key", "123456789"}}, wantErr: httpkey.ErrMalformed, wantSub: "9 bytes, longer than 8"},
		{name: "newline", headers: []header{{"X-API-Key", "abc\ndef"}}, wantErr: httpkey.ErrMalformed, wantSub: "byte 0x0a at offset 3"},
		{name: "NUL", headers: []header{{"X-API-Key", "\x00abc"}}, wantErr: httpkey.ErrMalformed, wantSub: "byte 0x00 at offset 0"},
		{name: "inner tab", headers: []header{{"X-API-Key", "ab\tc"}}, wantErr: httpkey.ErrMalformed, wantSub: "byte 0x09 at offset 2"},
		{name: "DEL", headers: []header{{"X-API-Key", "ab\x7f"}}, wantErr: httpkey.ErrMalformed, wantSub: "byte 0x7f at offset 2"},
		{name: "non-ASCII", headers: []header{{"X-API-Key", "clé"}}, wantErr: httpkey.ErrMalformed, wantSub: "byte 0xc3 at offset 2"},
		{name: "twice", headers: []header{{"X-API-Key", "a"}, {"X-API-Key", "b"}}, wantErr: httpkey.ErrMalformed, wantSub: "2 X-API-Key headers, want 1"},
		{name: "negative MaxLen", cfg: httpkey.APIKeyConfig{MaxLen: -1}, headers: []header{{"X-API-Key", secret}}, wantSub: "APIKeyConfig.MaxLen -1 is negative"},
		{name: "bad header name", cfg: httpkey.APIKeyConfig{Header: "X API Key"}, headers: []header{{"X-API-Key", secret}}, wantSub: `APIKeyConfig.Header "X API Key" is not a header name: byte 0x20 at offset 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpkey.APIKey(tt.cfg)(newRequest("192.0.2.1:1", tt.headers...))
			if tt.wantErr == nil && tt.wantSub == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			assert.Empty(t, got)
			assert.True(t, strings.HasPrefix(err.Error(), "httpkey: "), err.Error())
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
			} else {
				assert.NotErrorIs(t, err, httpkey.ErrNoKey)
				assert.Error(t, tt.cfg.Validate())
			}
			assert.Contains(t, err.Error(), tt.wantSub)
			assert.NotContains(t, err.Error(), secret, "the key must not leak into errors")
		})
	}
}

// TestAPIKeyHashHidesKey checks the hashed key's shape: fixed length, hex,
// nothing of the API key in it, and distinct keys kept distinct.
func TestAPIKeyHashHidesKey(t *testing.T) {
	e := httpkey.APIKey(httpkey.APIKeyConfig{Hash: true})
	seen := map[string]string{}
	for _, k := range []string{"sk_live_a", "sk_live_b", "key:sk_live_a", "keyhash:sk_live_a", strings.Repeat("z", 256)} {
		got, err := e(newRequest("192.0.2.1:1", header{"X-API-Key", k}))
		require.NoError(t, err)
		require.Len(t, got, len("keyhash:")+32)
		assert.True(t, strings.HasPrefix(got, "keyhash:"))
		_, err = hex.DecodeString(strings.TrimPrefix(got, "keyhash:"))
		assert.NoError(t, err)
		assert.NotContains(t, got[len("keyhash:"):], k)
		assert.NotContains(t, seen, got, "%q and %q", seen[got], k)
		seen[got] = k
	}
}
