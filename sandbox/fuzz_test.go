package sandbox

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// FuzzDecodePolicy: any bytes either decode to a policy whose paths are all
// absolute, or are refused; a policy encodes and decodes to itself.
func FuzzDecodePolicy(f *testing.F) {
	good, _ := json.Marshal(nsPolicy{Workspace: "/w", Cwd: "/w/sub", Hidden: []string{"/data"}, HiddenIDs: []fileID{{Dev: 2049, Ino: 12}}, TmpSize: 1 << 30, ReadOnly: []string{"/opt/x"}, Limits: DefaultLimits(), Landlock: true, Seccomp: true})
	for _, seed := range []string{string(good), `{}`, `{"workspace": "rel"}`, `{"workspace": "/w", "cwd": "/w"} {}`, `{"unknown": 1}`, `[]`, `{"limits": {"Processes": -1}}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := decodePolicy(raw)
		if err != nil {
			return
		}
		for _, path := range append([]string{p.Workspace, p.Cwd}, append(p.Hidden, p.ReadOnly...)...) {
			if !filepath.IsAbs(path) {
				t.Fatalf("decoded a relative path %q from %q", path, raw)
			}
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodePolicy(again); err != nil {
			t.Fatalf("a decoded policy does not decode again: %v (%s)", err, again)
		}
	})
}
