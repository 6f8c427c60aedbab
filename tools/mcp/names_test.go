package mcp

import (
	"regexp"
	"strings"
	"testing"
)

var providerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 80)
	for _, tc := range []struct {
		name, server, tool, want string
	}{
		{"plain", "fs", "read_file", "mcp__fs__read_file"},
		{"dash kept", "everything", "get-sum", "mcp__everything__get-sum"},
		{"dots and slashes", "gh", "repos/list.all", "mcp__gh__repos_list_all"},
		{"spaces and unicode", "s", "café menü", "mcp__s__caf__men_"},
		{"exactly 64", "s", strings.Repeat("t", 64-len("mcp__s__")), "mcp__s__" + strings.Repeat("t", 64-len("mcp__s__"))},
		{"65 is cut and hashed", "s", strings.Repeat("t", 65-len("mcp__s__")), ""},
		{"empty tool is hashed", "s", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ToolName(tc.server, tc.tool)
			if !providerName.MatchString(got) {
				t.Fatalf("ToolName=%q does not match the provider rule", got)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("ToolName=%q, want %q", got, tc.want)
			}
			if tc.want == "" && !regexp.MustCompile(`_[0-9a-f]{8}$`).MatchString(got) {
				t.Fatalf("ToolName=%q, want a name ending in _ and 8 hex digits", got)
			}
			if s, ok := ServerOf(got); !ok || s != tc.server {
				t.Fatalf("ServerOf(%q)=%q,%v, want %q", got, s, ok, tc.server)
			}
		})
	}
	a, b := ToolName("srv", long+"a"), ToolName("srv", long+"b")
	if a == b || len(a) != MaxName || len(b) != MaxName {
		t.Fatalf("two long names share their first 64 characters: %q, %q", a, b)
	}
	if ToolName("srv", long+"a") != a {
		t.Fatal("ToolName is not stable")
	}
}

func TestServerOf(t *testing.T) {
	for _, tc := range []struct {
		in, server string
		ok         bool
	}{
		{"mcp__fs__read", "fs", true},
		{"mcp__my_srv__read", "my_srv", true},
		{"mcp__my___x", "my", true}, // a tool whose name starts with '_'
		{"mcp____x", "", false},
		{"mcp__fs", "", false},
		{"read", "", false},
		{"mcp_fs__read", "", false},
	} {
		s, ok := ServerOf(tc.in)
		if s != tc.server || ok != tc.ok {
			t.Errorf("ServerOf(%q)=%q,%v, want %q,%v", tc.in, s, ok, tc.server, tc.ok)
		}
	}
}

// FuzzToolName: any server tool name gives a name providers accept, that
// starts with the server's prefix (unless it had to be cut into), is
// stable, and belongs to its server.
func FuzzToolName(f *testing.F) {
	for _, s := range []string{"read_file", "", "a.b", "ünïcødé", strings.Repeat("z", 100), "\x00\xff", "mcp__x__y", "__"} {
		f.Add("fs", s)
		f.Add(strings.Repeat("s", 32), s)
	}
	f.Fuzz(func(t *testing.T, server, tool string) {
		if !regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-]){0,31}$`).MatchString(server) {
			return // config refuses such a server name
		}
		got := ToolName(server, tool)
		if !providerName.MatchString(got) {
			t.Fatalf("ToolName(%q, %q)=%q breaks ^[a-zA-Z0-9_-]{1,64}$", server, tool, got)
		}
		if ToolName(server, tool) != got {
			t.Fatalf("ToolName(%q, %q) is not stable", server, tool)
		}
		if s, ok := ServerOf(got); !ok || s != server {
			t.Fatalf("ServerOf(ToolName(%q, %q)=%q)=%q,%v", server, tool, got, s, ok)
		}
	})
}
