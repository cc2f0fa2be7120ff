package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// roundTrip sends a line through addr on a new connection and reads it back.
func roundTrip(addr string) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, io.ErrUnexpectedEOF
	}
	return time.Since(start), nil
}

func TestFaults(t *testing.T) {
	p := Start(t, echoServer(t))

	_, err := roundTrip(p.Addr())
	require.NoError(t, err, "a clean proxy forwards")

	p.Latency(t, 100*time.Millisecond)
	took, err := roundTrip(p.Addr())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "latency both ways")

	p.Clear()
	p.ResetPeers(t)
	_, err = roundTrip(p.Addr())
	require.Error(t, err, "a reset connection answers nothing")

	p.Clear()
	_, err = roundTrip(p.Addr())
	assert.NoError(t, err, "Clear removes every fault")
}
