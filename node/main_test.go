package node_test

import (
	"os"
	"testing"

	"github.com/callsheet/callsheet/sandbox"
)

// TestMain lets this test binary serve as the shell sandbox helper.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
