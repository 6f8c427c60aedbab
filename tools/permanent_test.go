package tools

import (
	"strings"
	"syscall"
	"testing"

	"github.com/callsheet/callsheet/tool"
)

// TestPermanentFailures: the failures a retry cannot fix are permanent
// (tool.IsPermanent), so the runtime does not retry them even for a
// replay-safe tool; a failure that may pass is not.
func TestPermanentFailures(t *testing.T) {
	e := newEnv(t)
	if err := syscall.Mkfifo(e.root+"/fifo", 0o600); err != nil {
		t.Fatal(err)
	}
	e.file(t, "bin", "\x00\x01\x02binary")
	fetch, err := WebFetch(WebOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rg := ripgrep(t)
	for _, tc := range []struct {
		name string
		tl   *tool.Tool
		args string
	}{
		{"blocked address", fetch, `{"url": "http://127.0.0.1:1/"}`},
		{"metadata host", fetch, `{"url": "http://169.254.169.254/latest"}`},
		{"bad scheme", fetch, `{"url": "ftp://example.com/x"}`},
		{"no host", fetch, `{"url": "http:///x"}`},
		{"bad glob", searchTool(t, rg, "glob"), `{"pattern": "a/[b"}`},
		{"empty glob", searchTool(t, rg, "glob"), `{"pattern": ""}`},
		{"bad regex", searchTool(t, rg, "grep"), `{"pattern": "a(b"}`},
		{"glob in a file", searchTool(t, rg, "glob"), `{"pattern": "*", "path": "bin"}`},
		{"name too long", builtin(t, "read"), `{"path": "` + strings.Repeat("n", 300) + `"}`},
		{"FIFO", builtin(t, "read"), `{"path": "fifo"}`},
		{"binary", builtin(t, "read"), `{"path": "bin"}`},
		{"missing", builtin(t, "read"), `{"path": "secret"}`},
		{"outside", builtin(t, "read"), `{"path": "../outside"}`},
	} {
		_, err := call(t, e.ctx, tc.tl, tc.args)
		if err == nil || !tool.IsPermanent(err) {
			t.Errorf("%s: err=%v, want a permanent failure", tc.name, err)
		}
	}
}
