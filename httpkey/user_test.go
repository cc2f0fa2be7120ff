package httpkey_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

// userKey is the context key of the test's authentication middleware.
type userKey struct{}

func userFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(userKey{}).(string)
	return id, ok
}

func TestUser(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func(context.Context) context.Context
		want    string
		wantErr string
		noKey   bool
	}{
		{name: "authenticated", ctx: func(c context.Context) context.Context { return context.WithValue(c, userKey{}, "42") }, want: "user:42"},
		{name: "id with separators", ctx: func(c context.Context) context.Context { return context.WithValue(c, userKey{}, "a|b") }, want: "user:a|b"},
		{name: "anonymous", ctx: func(c context.Context) context.Context { return c }, noKey: true, wantErr: "no authenticated user"},
		{name: "empty id", ctx: func(c context.Context) context.Context { return context.WithValue(c, userKey{}, "") }, wantErr: "empty id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest("192.0.2.1:1")
			r = r.WithContext(tt.ctx(r.Context()))
			got, err := httpkey.User(userFromContext)(r)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "httpkey: ")
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Equal(t, tt.noKey, errors.Is(err, httpkey.ErrNoKey))
		})
	}
}

func TestUserNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, "httpkey: User needs a function, got nil", func() { httpkey.User(nil) })
}
