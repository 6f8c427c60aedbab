package clients_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/callsheet/callsheet/internal/clienttest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, testnode.Cleanup) }

// run runs argv in dir with the clients' environment and fails the test
// with its output when it fails; it logs the output either way.
func run(t *testing.T, env *clienttest.Env, dir string, extra []string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env.Environ()...), extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out.String())
	}
	t.Logf("%v:\n%s", argv, out.String())
	return out.String()
}

// TestPython runs clients/python's unittest suite with the machine's
// python3 (scripts/ensure-python) against a node and the faulty proxy.
func TestPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed (scripts/ensure-python): %v", err)
	}
	env := clienttest.Start(t)
	dir, _ := filepath.Abs("python")
	run(t, env, dir, []string{"PYTHONPATH=" + filepath.Join(dir, "src"), "PYTHONDONTWRITEBYTECODE=1"}, py, "-m", "unittest", "discover", "-v", "-s", "tests")
}

// TestTypeScript builds @callsheet/client with the pinned tsc
// (scripts/ensure-native-deps) and runs its node:test suite with Node 22
// (scripts/ensure-mcp-deps) and with the machine's node when it is another
// version (Node 20 here), against a node and the faulty proxy; the
// providers' SDKs come from scripts/ensure-native-deps too.
func TestTypeScript(t *testing.T) {
	tsc := testenv.Tsc(t)
	dir, _ := filepath.Abs("typescript")
	pkg := filepath.Join(t.TempDir(), "client")
	cmd := exec.Command(tsc[0], tsc[1], "-p", dir, "--outDir", filepath.Join(pkg, "dist"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p clients/typescript: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "package.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := []string{testenv.Node22(t)}
	if sys, err := exec.LookPath("node"); err == nil {
		v22, _ := exec.Command(nodes[0], "--version").Output()
		vs, _ := exec.Command(sys, "--version").Output()
		if !bytes.Equal(v22, vs) {
			nodes = append(nodes, sys)
		}
	}
	// The providers' SDKs, whose stream parsers the streamed-turn test
	// reads recorded streams with.
	mods := filepath.Join(testenv.NativeDeps(t), "node_modules")
	env := clienttest.Start(t)
	for _, node := range nodes {
		v, _ := exec.Command(node, "--version").Output()
		t.Run("node "+string(bytes.TrimSpace(v)), func(t *testing.T) {
			run(t, env, dir, []string{"CALLSHEET_CLIENT_DIST=" + filepath.Join(pkg, "dist"), "CALLSHEET_NATIVE_MODULES=" + mods}, node, "--test", "--test-reporter=spec", "--test-timeout=60000", "test/client.test.mjs")
		})
	}
}
