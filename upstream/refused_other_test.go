//go:build !unix

package upstream

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// refusingAddr returns a loopback address nothing listens on: a listener's,
// closed. Another test may take its port meanwhile (see the unix version).
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
