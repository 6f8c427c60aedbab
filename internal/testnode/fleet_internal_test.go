package testnode

import (
	"slices"
	"testing"
)

// TestLastErrors: a failed fleet test shows the last error-level lines of
// each node's log, text or JSON, and nothing else.
func TestLastErrors(t *testing.T) {
	log := "time=1 level=INFO msg=up\n" +
		"time=2 level=ERROR msg=\"internal error\" err=a\n" +
		"time=3 level=WARN msg=lease\n" +
		`{"time":4,"level":"ERROR","msg":"internal error","err":"b"}` + "\n" +
		"time=5 level=ERROR msg=\"internal error\" err=c"
	if got, want := lastErrors(log, 2), []string{`{"time":4,"level":"ERROR","msg":"internal error","err":"b"}`, `time=5 level=ERROR msg="internal error" err=c`}; !slices.Equal(got, want) {
		t.Fatalf("lastErrors = %q, want %q", got, want)
	}
	if got := lastErrors("time=1 level=INFO msg=up\n", 5); len(got) != 0 {
		t.Fatalf("lastErrors of a log without errors = %q", got)
	}
}
