package node

import (
	"testing"

	"github.com/callsheet/callsheet/internal/israce"
)

// TestOpeningAWorkspaceWordsNoErrorForFree: every call opens its session's
// workspace, and wording its error when there is none allocates nothing.
func TestOpeningAWorkspaceWordsNoErrorForFree(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	if got := testing.AllocsPerRun(100, func() { _ = workspaceErr(nil) }); got != 0 {
		t.Fatalf("workspaceErr(nil) allocates %v times, want 0", got)
	}
}
