package cluster_test

import (
	"os"
	"testing"
)

// TestMain runs the test binary as a member process instead of the tests
// when membersChildEnv is set (membersChild; the stopped-process test
// starts it so that it can SIGSTOP a real process).
func TestMain(m *testing.M) {
	if os.Getenv(membersChildEnv) != "" {
		os.Exit(membersChild())
	}
	os.Exit(m.Run())
}
