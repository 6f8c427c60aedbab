package mcp

import (
	"testing"

	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/internal/testenv"
)

// TestMain lets this binary serve as the mcptest helper MCP server when a
// test starts it with mcptest.Env set.
func TestMain(m *testing.M) {
	mcptest.ServeIfHelper()
	testenv.Main(m, nil, nil)
}
