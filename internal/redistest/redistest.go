// Package redistest starts private, disposable redis-server processes for
// tests, so that tests can exercise real Redis behaviour (including failures:
// crash, hang, restart with data loss) without ever touching a Redis they did
// not start.
//
// Every server listens on a free loopback port chosen at start, runs in its
// own t.TempDir() without persistence, and is killed (SIGKILL) and reaped by
// t.Cleanup, also when the test fails. A Server can be killed (Kill), frozen
// (Pause/Resume, i.e. SIGSTOP/SIGCONT: TCP connects still succeed but nothing
// answers), restarted empty on the same port (Restart) or flushed (Flush).
//
// StartCluster builds a real Redis Cluster of N masters (no replicas) with
// redis-cli --cluster create. Its masters are ordinary *Server values, so the
// same failure operations apply to one master at a time; WaitHealthy waits
// until the cluster has converged again.
//
// The binaries are found with Binary: $REDIS_SERVER / $REDIS_CLI, else PATH.
// A missing binary fails the test (it is never skipped), because a silently
// skipped integration test hides exactly the bugs it exists to catch.
//
// Servers and clusters are safe for concurrent use. The failure-reporting
// methods without a testing.TB argument (Restart, Flush, Cluster.Flush) call
// Fatalf on the testing.TB given to Start/StartCluster, so, like t.Fatal,
// they should be called from the goroutine running that test (not from a
// subtest's goroutine) for a failure to stop the test cleanly.
//
// Clients from Client follow the address, not the process: after Kill they
// get connection errors, after Restart they reconnect to the new process.
// The package's own connections (Do, Flush, readiness and health probes)
// additionally check the answering process id, so they never touch a Redis
// this package did not start even if another process took a freed port.
package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Binary reports where the redis-server and redis-cli executables are: the
// paths in $REDIS_SERVER and $REDIS_CLI when set, else the ones found on
// PATH. It returns an error, phrased as one sentence naming what to install or
// set, when either cannot be found.
func Binary() (server, cli string, err error) {
	server, err = lookBinary("redis-server", "REDIS_SERVER")
	if err != nil {
		return "", "", err
	}
	cli, err = lookBinary("redis-cli", "REDIS_CLI")
	if err != nil {
		return "", "", err
	}
	return server, cli, nil
}

// lookBinary resolves one executable, preferring the environment variable
// env over a PATH lookup of name.
func lookBinary(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		resolved, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("redistest: %s=%q is not an executable %s (%v); point %s at a %s binary or unset it", env, p, name, unwrapExecErr(err), env, name)
		}
		return resolved, nil
	}
	resolved, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH; install Redis 6.2+ (apt-get install redis-server) or set %s", name, env)
	}
	return resolved, nil
}

// unwrapExecErr strips exec.Error's own "exec: name:" prefix so the message
// stays one readable sentence.
func unwrapExecErr(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}
