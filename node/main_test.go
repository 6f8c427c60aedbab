package node_test

import (
	"testing"

	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/internal/testenv"
)

// TestMain lets this binary serve as the shell sandbox helper and as the
// mcptest MCP server, and finds rg.
func TestMain(m *testing.M) {
	mcptest.ServeIfHelper()
	testenv.Main(m, nil, nil)
}
