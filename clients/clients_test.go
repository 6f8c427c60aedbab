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
