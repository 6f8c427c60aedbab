// Package version describes the running binary from its build information
// (runtime/debug.ReadBuildInfo), for the --version flag of cmd/callsheet-node and
// cmd/callsheet-replay.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Line returns one line naming program and the build: the module version
// ("(devel)" for a build from a work tree), the VCS revision and its time,
// "modified" when the work tree had changes, and the Go version and
// platform. Fields the build did not record are left out; a binary built
// with -buildvcs=false has no revision.
func Line(program string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("%s (no build information) %s %s/%s", program, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	return format(program, info)
}

func format(program string, info *debug.BuildInfo) string {
	parts := []string{program}
	if v := info.Main.Version; v != "" {
		parts = append(parts, v)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		r := "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			r += " (" + t + ")"
		}
		if settings["vcs.modified"] == "true" {
			r += " modified"
		}
		parts = append(parts, r)
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	goos, goarch := settings["GOOS"], settings["GOARCH"]
	if goos == "" {
		goos, goarch = runtime.GOOS, runtime.GOARCH
	}
	parts = append(parts, goVersion, goos+"/"+goarch)
	return strings.Join(parts, " ")
}

// Short returns the module version and, when recorded, the VCS revision
// ("(devel)+0123456789ab"): the service.version of the node's traces. ""
// without build information.
func Short() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			v += "+" + s.Value[:min(12, len(s.Value))]
		}
	}
	return v
}
