package tool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

type marked struct{ permanent bool }

func (m marked) Error() string   { return "marked" }
func (m marked) Permanent() bool { return m.permanent }

func TestIsPermanent(t *testing.T) {
	_, tooLong := os.Stat(strings.Repeat("n", 300))
	_, notDir := os.Stat("/etc/passwd/x")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("connection reset"), false},
		{"Permanent", Permanent(errors.New("bad glob")), true},
		{"wrapped Permanent", fmt.Errorf("glob: %w", Permanent(errors.New("bad"))), true},
		{"invalid arguments", &ArgumentError{Problems: []ArgumentProblem{{Message: "x"}}}, true},
		{"no runtime", ErrNoRuntime, true},
		{"marked", fmt.Errorf("resolve: %w", marked{true}), true},
		{"marked not", marked{false}, false},
		{"not exist", fmt.Errorf("read: %w", fs.ErrNotExist), true},
		{"name too long", tooLong, true},
		{"not a directory", notDir, true},
		{"is a directory", &fs.PathError{Op: "write", Path: "d", Err: syscall.EISDIR}, true},
		{"EAGAIN", &fs.PathError{Op: "read", Path: "f", Err: syscall.EAGAIN}, false},
		{"timeout", fmt.Errorf("shell: %w", context.DeadlineExceeded), false},
		{"cancelled but marked", errors.Join(Permanent(errors.New("x")), context.Canceled), false},
	} {
		if got := IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
