package tool_test

import (
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
)

// TestMain prepares the binary for the tests that start a real node
// (sandbox helper, ripgrep).
func TestMain(m *testing.M) { testenv.Main(m, nil, nil) }
