//go:build !amd64 && !arm64

package sandbox

// modeCalls is empty where the filter is not supported (auditArch is 0).
var modeCalls []modeCall
