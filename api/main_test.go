package api

import (
	"testing"

	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestMain lets this binary serve as the shell sandbox helper and as the
// mcptest MCP server, finds rg, and removes the node binaries
// internal/testnode built (the conformance test runs a real node).
func TestMain(m *testing.M) {
	mcptest.ServeIfHelper()
	testenv.Main(m, nil, testnode.Cleanup)
}
