// Package testenv prepares test binaries that drive a real node: they must be
// able to serve as the shell sandbox helper (sandbox.Main re-executes the
// binary), and glob and grep need ripgrep 14+.
package testenv

import (
	"os"
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
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rg := filepath.Join(dir, ".tools", "bin", "rg")
			_, err := os.Stat(rg)
			return rg, err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
