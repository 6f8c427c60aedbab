package tools

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// scenarioDir holds the apply_patch scenario fixtures: one directory per
// scenario with
//
//	input/      the workspace before (optional: empty)
//	patch.txt   the patch argument, byte for byte
//	expected/   the workspace after (directories are those its files imply)
//	error.txt   instead of expected/: lines the error must contain; the
//	            workspace must then be exactly as before (all or nothing)
//	result.txt  optional: the tool's whole output on success
//
// The fixtures are ours (docs/tools/apply_patch.md describes what they
// check); .gitattributes keeps their bytes as written, CRLF included.
const scenarioDir = "testdata/apply_patch"

// TestPatchScenarios runs every scenario of scenarioDir through the
// apply_patch tool in a fresh workspace.
func TestPatchScenarios(t *testing.T) {
	entries, err := os.ReadDir(scenarioDir)
	if err != nil {
		t.Fatal(err)
	}
	tl := patchTool(t)
	ran, passed := 0, 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		ran++
		dir := filepath.Join(scenarioDir, e.Name())
		ok := t.Run(e.Name(), func(t *testing.T) {
			env := newEnv(t)
			if err := copyTree(filepath.Join(dir, "input"), env.root); err != nil {
				t.Fatal(err)
			}
			before := treeSnapshot(t, env.root)
			patch, err := os.ReadFile(filepath.Join(dir, "patch.txt"))
			if err != nil {
				t.Fatal(err)
			}
			args, _ := json.Marshal(patchArgs{Patch: string(patch)})
			res, runErr := call(t, env.ctx, tl, string(args))

			if want, err := os.ReadFile(filepath.Join(dir, "error.txt")); err == nil {
				if runErr == nil {
					t.Fatalf("the patch applied (%q); want an error containing %q", text(t, res), strings.TrimSpace(string(want)))
				}
				for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
					if !strings.Contains(runErr.Error(), line) {
						t.Errorf("error %q does not contain %q", runErr, line)
					}
				}
				if strings.Contains(runErr.Error(), env.root) {
					t.Errorf("error %q shows the workspace's absolute path", runErr)
				}
				if after := treeSnapshot(t, env.root); !reflect.DeepEqual(after, before) {
					t.Errorf("a refused patch changed the workspace:\n got %q\nwant %q", after, before)
				}
				return
			} else if !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}

			if runErr != nil {
				t.Fatalf("apply_patch: %v", runErr)
			}
			want := map[string]string{}
			expected := filepath.Join(dir, "expected")
			if err := filepath.WalkDir(expected, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(expected, p)
				b, err := os.ReadFile(p)
				want[rel] = string(b)
				for up := filepath.Dir(rel); up != "."; up = filepath.Dir(up) {
					want[up+"/"] = ""
				}
				return err
			}); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			want["./"] = ""
			if got := treeSnapshot(t, env.root); !reflect.DeepEqual(got, want) {
				t.Errorf("workspace after the patch:\n got %q\nwant %q", got, want)
			}
			if wantOut, err := os.ReadFile(filepath.Join(dir, "result.txt")); err == nil {
				if got := text(t, res); got != string(wantOut) {
					t.Errorf("result %q, want %q", got, wantOut)
				}
			}
		})
		if ok {
			passed++
		}
	}
	t.Logf("apply_patch scenarios: %d of %d pass", passed, ran)
	if ran < 60 {
		t.Errorf("only %d scenarios in %s; the set covers at least 60", ran, scenarioDir)
	}
}

// copyTree copies the files under src (if it exists) into dst.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
