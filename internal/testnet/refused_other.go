//go:build !unix

package testnet

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// RefusingAddr returns a loopback address nothing listens on: a listener's,
// closed. Another test may take its port meanwhile (see the unix version).
func RefusingAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
