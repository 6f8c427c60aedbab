package crash

import (
	"os"
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
)

// TestMain lets this binary serve as the shell sandbox helper, finds rg (the
// node processes it starts inherit CALLSHEET_RG), and keeps the built
// binaries in one directory for the whole run.
func TestMain(m *testing.M) {
	testenv.Main(m, func() {
		var err error
		if binDir, err = os.MkdirTemp("", "callsheet-crash-bin-"); err != nil {
			panic(err)
		}
	}, func() { os.RemoveAll(binDir) })
}
