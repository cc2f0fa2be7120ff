package remote

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A round fails only for what Redis is to blame for: a report refused
// before it was sent (a limit Async cannot share) must not open the breaker,
// and a Redis error says more than a key's own fault.
func TestRoundError(t *testing.T) {
	unsendable := &Error{Kind: ErrRedis, Op: "contest", Key: "k", Err: ErrNotReconcilable}
	wrongType := &Error{Kind: ErrWrongType, Op: "contest", Key: "k", Err: errors.New("WRONGTYPE")}
	down := &Error{Kind: ErrUnavailable, Op: "contest", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name string
		errs []error
		want error
	}{
		{"no reports", nil, nil},
		{"one succeeded", []error{down, nil}, nil},
		{"only unsendable reports", []error{unsendable, unsendable}, nil},
		{"unsendable and redis down", []error{unsendable, down}, down},
		{"a key's fault and redis down", []error{wrongType, down}, down},
		{"only a key's fault", []error{unsendable, wrongType}, wrongType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := roundError(tc.errs, func(err error) error { return err })
			assert.Equal(t, tc.want, got)
		})
	}
}
