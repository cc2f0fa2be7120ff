package remote

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// TestTLSPassesThrough runs decisions and a reconcile round over TLS: the
// client the caller hands in carries its tls.Config, and the store adds
// nothing that would bypass it. A client that does not trust the server's
// certificate gets an error, not a decision.
func TestTLSPassesThrough(t *testing.T) {
	certFile, keyFile, pool := selfSignedCert(t)
	tlsPort := freeLoopbackPort(t)
	srv := redistest.Start(t, redistest.WithArgs(
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile,
		"--tls-auth-clients", "no",
	))
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))

	c := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Ping(bg))

	lim := limit.PerSecond(1).WithBurst(2)
	for i, want := range []bool{true, true, false} {
		d, err := s.AllowN(bg, "tls", lim, 1)
		require.NoError(t, err)
		assert.Equal(t, want, d.Allowed, "decision %d", i)
	}
	var r Round
	require.NoError(t, s.Reconcile(bg, []Report{{Key: "other", Limit: lim, Epoch: 1, Total: 1, Demand: 1}}, &r))
	require.Len(t, r.Answers, 1)
	assert.NoError(t, r.Answers[0].Err)
	assert.Equal(t, 1, r.Nodes)

	// The state is in the server behind the TLS port.
	n, err := srv.Client(t).DBSize(bg).Result()
	require.NoError(t, err)
	assert.Positive(t, n)

	untrusting := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, DialTimeout: 2 * time.Second,
		TLSConfig: &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { _ = untrusting.Close() })
	bad, err := New(untrusting, Options{})
	require.NoError(t, err)
	_, err = bad.AllowN(bg, "tls", lim, 1)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnavailable, "a TLS handshake failure is Redis being unreachable: %v", err)
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key into a
// temporary directory and returns their paths and a pool that trusts it.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hybridlimit test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
