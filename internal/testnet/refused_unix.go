//go:build unix

package testnet

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// RefusingAddr returns a loopback address that refuses connections for as
// long as the test runs: a TCP socket bound to it and never listening. A
// listener closed instead frees its port, which another test running
// beside this one may take (a redis-server, an HTTP server) and answer, or
// never answer: a dial there then hangs instead of being refused.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	in4, ok := sa.(*syscall.SockaddrInet4)
	require.True(t, ok)
	return fmt.Sprintf("127.0.0.1:%d", in4.Port)
}
