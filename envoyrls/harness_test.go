package envoyrls_test

import (
	"context"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"

	"github.com/hybridlimit/hybridlimit/envoyrls"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// rig is a Service behind a real gRPC server on loopback, and a client.
type rig struct {
	svc    *envoyrls.Service
	lim    *hybrid.Limiter
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	health *health.Server
	addr   string
}

// startRig serves cfg's rules with a limiter of mode on rdb (nil: local
// only) until the test ends.
func startRig(t *testing.T, rdb redis.UniversalClient, hcfg hybrid.Config, scfg envoyrls.Config) *rig {
	t.Helper()
	hcfg.Redis = rdb
	lim, err := hybrid.New(hcfg)
	require.NoError(t, err)
	scfg.Limiter = lim
	svc, err := envoyrls.New(scfg)
	require.NoError(t, err)
	srv, hs := envoyrls.NewServer(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.GracefulStop()
		<-served
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
		_ = lim.Close(ctx)
	})
	return &rig{svc: svc, lim: lim, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, health: hs, addr: ln.Addr().String()}
}

// static returns a Rules func of one file's configuration.
func static(t *testing.T, yaml string) func() *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	require.NoError(t, err)
	return func() *config.Config { return cfg }
}
