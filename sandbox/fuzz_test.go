package sandbox

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodePrep: any bytes either decode to a prepare message whose paths
// are all absolute, or are refused; a message encodes and decodes to
// itself.
func FuzzDecodePrep(f *testing.F) {
	good, _ := json.Marshal(nsPrep{Workspace: "/w", Hidden: []string{"/data"}, HiddenIDs: []fileID{{Dev: 2049, Ino: 12}}, TmpSize: 1 << 30, ReadOnly: []string{"/opt/x"}, Landlock: true, Seccomp: true})
	for _, seed := range []string{string(good), `{}`, `{"workspace": "rel"}`, `{"hidden": ["/a"]} {}`, `{"unknown": 1}`, `[]`, `{"read_only": ["x"]}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := decodePrep(raw)
		if err != nil {
			return
		}
		paths := append(append([]string{}, p.Hidden...), p.ReadOnly...)
		if p.Workspace != "" {
			paths = append(paths, p.Workspace)
		}
		for _, path := range paths {
			if !filepath.IsAbs(path) {
				t.Fatalf("decoded a relative path %q from %q", path, raw)
			}
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodePrep(again); err != nil {
			t.Fatalf("a decoded message does not decode again: %v (%s)", err, again)
		}
	})
}

// FuzzDecodeCall: any bytes either decode to a call whose paths are all
// absolute, whose directory lies in its workspace and which has a command,
// or are refused; a call encodes and decodes to itself.
func FuzzDecodeCall(f *testing.F) {
	good, _ := json.Marshal(nsCall{Workspace: "/w", Cwd: "/w/sub", ReadOnly: []string{"/opt/x"}, Args: []string{"bash", "-c", "true"}, Env: []string{"PATH=/bin"}, Stdio: true, Limits: DefaultLimits()})
	for _, seed := range []string{string(good), `{}`, `{"workspace": "/w", "cwd": "/elsewhere", "args": ["x"]}`, `{"workspace": "/w", "cwd": "/w/../x", "args": ["x"]}`,
		`{"workspace": "/w", "cwd": "/w", "args": []}`, `{"workspace": "/w", "cwd": "/w", "args": [""]}`, `{"unknown": 1}`, `{"limits": {"Processes": -1}}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := decodeCall(raw, false)
		if err != nil {
			return
		}
		for _, path := range append([]string{c.Workspace, c.Cwd}, c.ReadOnly...) {
			if !filepath.IsAbs(path) {
				t.Fatalf("decoded a relative path %q from %q", path, raw)
			}
		}
		if rel, err := filepath.Rel(c.Workspace, c.Cwd); err != nil || !filepath.IsLocal(rel) && rel != "." {
			t.Fatalf("decoded a directory %q outside the workspace %q from %q", c.Cwd, c.Workspace, raw)
		}
		if len(c.Args) == 0 || c.Args[0] == "" {
			t.Fatalf("decoded a call with no command from %q", raw)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeCall(again, false); err != nil {
			t.Fatalf("a decoded call does not decode again: %v (%s)", err, again)
		}
	})
}

// FuzzDecodeSpawn: any bytes either decode to a spawn request with
// arguments and ids that are not negative, or are refused; a request
// encodes and decodes to itself.
func FuzzDecodeSpawn(f *testing.F) {
	f.Add([]byte(`{"args":["/proc/self/fd/5","x"],"env":["GOMAXPROCS=1"],"uid":1000,"gid":1000,"network":true,"root":false}`))
	f.Add([]byte(`{"args":[],"uid":-1}`))
	f.Add([]byte(`{"args":["a"],"uid":1,"uid":2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := decodeSpawn(raw)
		if err != nil {
			return
		}
		if len(req.Args) == 0 || req.UID < 0 || req.GID < 0 {
			t.Fatalf("decoded %+v from %q", req, raw)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeSpawn(again)
		if err != nil || !reflect.DeepEqual(back, req) {
			t.Fatalf("a decoded request does not decode to itself: %+v, %v (%s)", back, err, again)
		}
	})
}

// FuzzNamesID: namesID reads any file without failing, finds an id only in
// a line's third field, and finds the line nameIDs appends to a file (so a
// view named once is not named twice).
func FuzzNamesID(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/usr/sbin/nologin\n"), 1879048192)
	f.Add([]byte("a:b\n::7\n"), 7)
	f.Add([]byte("x:x:12"), 12)
	f.Fuzz(func(t *testing.T, file []byte, id int) {
		id = int(uint32(id))
		if namesID(file, id) {
			want := []byte(":" + strconv.Itoa(id))
			if !bytes.Contains(file, want) {
				t.Fatalf("id %d found in a file without %q", id, want)
			}
		}
		for _, line := range []string{userLine(id, id), groupLine(id), "a:b:" + strconv.Itoa(id) + "\n"} {
			named := append(append(bytes.Clone(file), '\n'), line...)
			if !namesID(named, id) {
				t.Fatalf("id %d not found after %q was appended to %q", id, line, file)
			}
		}
	})
}

// FuzzParseMounts: parseMounts reads any input without failing (lines of
// the scanner's size), keeps one mount per line of five fields or more with
// its escapes undone, and aliases of any path over the result neither fail
// nor return the path itself.
func FuzzParseMounts(f *testing.F) {
	f.Add([]byte("22 1 0:21 / / rw,relatime - tmpfs tmpfs rw\n30 22 8:1 /srv/data /mnt/data\\040x rw - ext4 /dev/sda1 rw\n"), "/mnt/data x/cfg")
	f.Add([]byte("1 2 3\n\\\\\\0 a b c d\n"), "/")
	f.Fuzz(func(t *testing.T, file []byte, path string) {
		tab, err := parseMounts(bytes.NewReader(file))
		if err != nil {
			t.Fatalf("parseMounts: %v", err)
		}
		lines := 0
		for line := range strings.Lines(string(file)) {
			if len(strings.Fields(line)) >= 5 {
				lines++
			}
		}
		if len(tab) != lines {
			t.Fatalf("%d mounts from %d lines of five fields or more", len(tab), lines)
		}
		for _, m := range tab {
			if m.dev == "" || strings.Contains(m.dev, " ") {
				t.Fatalf("a mount's device %q", m.dev)
			}
		}
		if !filepath.IsAbs(path) {
			return
		}
		for _, a := range tab.aliases(filepath.Clean(path)) {
			if a == filepath.Clean(path) {
				t.Fatalf("aliases of %q include itself", path)
			}
		}
	})
}
