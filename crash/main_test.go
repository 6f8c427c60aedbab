package crash

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/callsheet/callsheet/sandbox"
)

// TestMain lets this test binary serve as the shell sandbox helper.
func TestMain(m *testing.M) {
	sandbox.Main()
	// glob and grep need rg 14+: use the one scripts/ensure-rg installs
	// when neither CALLSHEET_RG nor PATH names one.
	if os.Getenv("CALLSHEET_RG") == "" {
		if rg, err := filepath.Abs("../.tools/bin/rg"); err == nil {
			if _, err := os.Stat(rg); err == nil {
				os.Setenv("CALLSHEET_RG", rg)
			}
		}
	}
	var err error
	if binDir, err = os.MkdirTemp("", "callsheet-crash-bin-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}
