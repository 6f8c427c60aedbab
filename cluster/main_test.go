package cluster_test

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// waitingTests is how many tests of this package run at once by default
// (-test.parallel, else the number of CPUs): they use little CPU.
const waitingTests = 16

// TestMain runs the test binary as a member process instead of the tests
// when membersChildEnv is set (membersChild; the stopped-process test
// starts it so that it can SIGSTOP a real process).
//
// The tests that take seconds, mostly waiting on elections, leases and
// stopped processes, run in parallel (t.Parallel), up to waitingTests at
// once unless -test.parallel says otherwise: each has its own servers,
// directories and ports. A test that sets a package variable
// (NoWatchRestart) does not, so none of them runs while it does.
func TestMain(m *testing.M) {
	if os.Getenv(membersChildEnv) != "" {
		os.Exit(membersChild())
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(waitingTests))
	}
	os.Exit(m.Run())
}
