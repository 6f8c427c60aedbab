package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Tool names as model providers accept them: ^[a-zA-Z0-9_-]{1,64}$.
const (
	// Prefix starts every name of a tool that comes from an MCP server.
	Prefix = "mcp__"
	// sep separates the server's name from the tool's.
	sep = "__"
	// MaxName is the longest tool name providers accept.
	MaxName = 64
	// hashLen is how many hex digits of SHA-256 end a shortened name.
	hashLen = 8
	// ResourceTool is the name (after the server's prefix) of the tool that
	// lists and reads a server's resources.
	ResourceTool = "read_resource"
)

// ToolName returns the callsheet name of tool of the MCP server named
// server: mcp__SERVER__TOOL, with every character outside [a-zA-Z0-9_-]
// replaced by '_'. When that would be longer than MaxName characters (or the
// tool's name is empty), it is cut and ends with '_' and the first 8 hex
// digits of the SHA-256 of the server's and the tool's names, so the same
// tool always gets the same name, and two long names that share their first
// 55 characters still differ. server is assumed valid (config checks it:
// letters, digits, '-' and single '_', at most 32); ToolName is pure and
// safe for concurrent use.
func ToolName(server, tool string) string {
	name := Prefix + server + sep + sanitize(tool)
	if len(name) <= MaxName && tool != "" {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	keep := min(len(name), MaxName-1-hashLen)
	return name[:keep] + "_" + hex.EncodeToString(sum[:])[:hashLen]
}

// ServerPrefix is the start of every tool name of server: mcp__SERVER__.
func ServerPrefix(server string) string { return Prefix + server + sep }

// ServerOf returns the server name a tool name belongs to, if it has the
// form mcp__SERVER__...: server names hold no "__", so the first "__" after
// the prefix ends it.
func ServerOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", false
	}
	server, _, ok := strings.Cut(rest, sep)
	if !ok || server == "" {
		return "", false
	}
	return server, true
}

// sanitize replaces every character outside [a-zA-Z0-9_-] with '_' (one
// per character, so "é" becomes one '_').
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
