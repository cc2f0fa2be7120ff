package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// A gRPC server whose health checks are limited per API key (the x-api-key
// metadata), two a minute. The limiter's clock is stopped so that the
// output is fixed; leave Clock nil in production.
func Example() {
	lim, err := hybrid.New(hybrid.Config{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	cfg, err := rules.Parse([]byte(`rate_limits:
  endpoints:
    /grpc.health.v1.Health/Check: {requests: 2, window: 60}
`))
	if err != nil {
		log.Fatal(err)
	}
	rs, err := rules.Compile(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ic, err := grpclimit.New(grpclimit.Config{
		Limiter: lim,
		Rules:   rules.Static(rs),
		Client:  httpkey.APIKey(httpkey.APIKeyConfig{Header: "x-api-key"}),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-123")
	for range 3 {
		var trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("  retry in", info.GetRetryDelay().AsDuration())
			}
		}
		if p := trailer.Get(grpclimit.PushbackKey); len(p) > 0 {
			fmt.Println("  grpc-retry-pushback-ms:", p[0])
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
	//   retry in 30s
	//   grpc-retry-pushback-ms: 30000
}
