package tools

import (
	"os"
	"testing"

	"github.com/callsheet/callsheet/sandbox"
)

// TestMain lets this test binary act as the sandbox helper: the shell tool
// re-executes the running binary to confine a command (see package sandbox).
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
