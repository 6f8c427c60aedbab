package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/internal/testnode"
)

// TestVersionFlag: --version prints one line from the build information
// and exits 0, starting nothing.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	out, err := exec.Command(testnode.Node(t, ""), "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	line := string(out)
	if !strings.HasPrefix(line, "callsheet-node ") || strings.Count(line, "\n") != 1 || !strings.Contains(line, " go1.") {
		t.Fatalf("--version printed %q, want one line: callsheet-node VERSION [revision R (TIME)] GO OS/ARCH", line)
	}
	t.Logf("%s", line)
}
