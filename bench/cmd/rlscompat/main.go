// Command rlscompat runs the compatibility suite (internal/rlscompat)
// against envoyproxy/ratelimit's own service and against hybridlimit rls,
// side by side, on one private redis-server, each with response headers off
// and on (every header of every answer checked), and the configuration files
// that either refuses through both services' loaders:
//
//	make rls-compat
//
// It prints a Markdown table of each case and each file, and exits non-zero
// when a service gives an answer other than the one the suite expects, or
// a file is refused otherwise than BadConfigs says.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/internal/rlscompat"
)

func main() {
	bin := flag.String("bin", ".bin", "the directory holding hybridlimit, service_cmd and config_check_cmd")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "rlscompat:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, binDir string) error {
	bins, err := rlsrun.FindBins(binDir, true)
	if err != nil {
		return err
	}
	srv, err := redisproc.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	root, err := os.MkdirTemp("", "rlscompat-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := rlsrun.WriteConfig(root, map[string]string{"compat.yaml": rlscompat.Config}); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(root, "services.log"))
	if err != nil {
		return err
	}
	defer logf.Close()

	// Each service twice: response headers off (both services' default),
	// then on under names of the operator's; every header of every answer
	// is checked.
	on := rlscompat.Headers{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"}
	settings := []struct {
		headers rlscompat.Headers
		env     []string
	}{
		{rlscompat.Headers{}, nil},
		{on, []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=" + on.Limit, "LIMIT_REMAINING_HEADER=" + on.Remaining, "LIMIT_RESET_HEADER=" + on.Reset}},
	}
	results := map[rlsrun.Kind][]rlscompat.Result{}
	for _, kind := range []rlsrun.Kind{rlsrun.Theirs, rlsrun.Ours} {
		for _, set := range settings {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				return err
			}
			in, err := rlsrun.Start(ctx, kind, bins, rlscompat.Domain, rlsrun.Options{Root: root, Redis: srv.Addr(), Env: set.env, Log: logf})
			if err != nil {
				return err
			}
			res, err := suite(ctx, in.GRPC, set.headers)
			_ = in.Stop()
			if err != nil {
				return fmt.Errorf("%v: %w", kind, err)
			}
			if prev := results[kind]; prev != nil {
				for i := range res { // one verdict a case: the first difference, headers off or on
					if prev[i].Err != nil {
						res[i].Err = prev[i].Err
					} else if res[i].Err != nil {
						res[i].Err = fmt.Errorf("response headers on: %w", res[i].Err)
					}
				}
			}
			results[kind] = res
		}
	}

	failed := 0
	fmt.Printf("# Compatibility: envoyproxy/ratelimit %s and hybridlimit rls\n\n", rlsrun.Version)
	fmt.Println("| case | envoyproxy/ratelimit | hybridlimit | behaviour |")
	fmt.Println("|---|---|---|---|")
	for i, c := range rlscompat.Cases() {
		theirs, ours := results[rlsrun.Theirs][i].Err, results[rlsrun.Ours][i].Err
		if theirs != nil || ours != nil {
			failed++
		}
		fmt.Printf("| %s | %s | %s | %s |\n", c.Name, verdict(theirs), verdict(ours), c.Doc)
	}
	fmt.Println()
	fmt.Println("| configuration file | envoyproxy/ratelimit | hybridlimit | why they differ |")
	fmt.Println("|---|---|---|---|")
	for _, c := range rlscompat.BadConfigs() {
		dir := filepath.Join(root, "bad", strings.ReplaceAll(c.Name, " ", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(c.YAML), 0o644); err != nil {
			return err
		}
		theirsOK, theirsOut := rlsrun.CheckConfig(bins, dir)
		_, ourErr := config.LoadDir(dir, config.DirOptions{})
		if theirsOK == c.TheyRefuse || (ourErr != nil) != c.WeRefuse {
			failed++
			fmt.Fprintf(os.Stderr, "%s: envoyproxy/ratelimit said %q; hybridlimit said %v\n", c.Name, strings.TrimSpace(lastLine(theirsOut)), ourErr)
		}
		fmt.Printf("| %s | %s | %s | %s |\n", c.Name, refused(!theirsOK), refused(ourErr != nil), c.Why)
	}
	for kind, res := range results {
		for _, r := range res {
			if r.Err != nil {
				fmt.Fprintf(os.Stderr, "%v: %s: %v\n", kind, r.Case.Name, r.Err)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d cases or files did not give the expected answers (above); see above", failed)
	}
	fmt.Printf("\nAll %d cases answered alike by both services; all %d files refused as expected.\n", len(rlscompat.Cases()), len(rlscompat.BadConfigs()))
	return nil
}

func suite(ctx context.Context, addr string, headers rlscompat.Headers) ([]rlscompat.Result, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return rlscompat.Run(c, rlsv3.NewRateLimitServiceClient(conn), headers)
}

func verdict(err error) string {
	if err == nil {
		return "as expected"
	}
	return "**differs**: " + strings.ReplaceAll(err.Error(), "|", "\\|")
}

func refused(r bool) string {
	if r {
		return "refused"
	}
	return "accepted"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
