package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
			{Key: "vcs.revision", Value: "421b6e1f0c2d9a8b7e6f5d4c3b2a19081726354a"}, {Key: "vcs.time", Value: "2026-12-01T09:13:33Z"}, {Key: "vcs.modified", Value: "false"},
		}}, "callsheet-node v1.2.3 revision 421b6e1f0c2d (2026-12-01T09:13:33Z) go1.26.8 linux/amd64"},
		{"work tree with changes", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"},
		}}, "callsheet-node (devel) revision abc modified go1.26.8 linux/arm64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := format("callsheet-node", &tc.info); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestLineIsOneLine(t *testing.T) {
	l := Line("callsheet-replay")
	if !strings.HasPrefix(l, "callsheet-replay ") || strings.Contains(l, "\n") || !strings.Contains(l, " go1.") {
		t.Fatalf("Line = %q", l)
	}
}
