package fleet

import (
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestMain finds rg (the node processes inherit CALLSHEET_RG) and removes
// the binaries internal/testnode built once the run ends.
func TestMain(m *testing.M) {
	testenv.Main(m, nil, testnode.Cleanup)
}
