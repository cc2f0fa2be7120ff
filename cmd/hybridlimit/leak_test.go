package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// mainArgsEnv, when set, makes the test binary run main with its lines as
// the arguments: a test runs the command as a process, to see its exit
// status and its standard streams.
const mainArgsEnv = "HYBRIDLIMIT_TEST_MAIN_ARGS"

// Every command stops what it starts: fleets, reconcilers, proxies, the
// gateway's servers and rules watcher.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"hybridlimit"}, strings.Split(args, "\n")...)
		if args == "" {
			os.Args = os.Args[:1]
		}
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
