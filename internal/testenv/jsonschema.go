package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SuiteCase is one case of the JSON Schema Test Suite: a schema and the
// tests of values against it.
type SuiteCase struct {
	// File is the draft's directory and the file: "draft7/ref.json".
	File        string          `json:"-"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// JSONSchemaSuite returns the cases of the official JSON Schema Test Suite
// for one draft ("draft2020-12" or "draft7"), in file order. The suite is
// the copy the pinned github.com/google/jsonschema-go module ships in its
// testdata (JSON-Schema-Test-Suite at commit 83e866b4, as its README says;
// fixed by go.sum): every file of tests/draft2020-12 but content.json,
// format.json and vocabulary.json, every file of tests/draft7, none of
// optional/.
func JSONSchemaSuite(t testing.TB, draft string) []SuiteCase {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/google/jsonschema-go").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/google/jsonschema-go: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "jsonschema", "testdata", draft)
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Fatalf("the JSON Schema Test Suite is not in %s (run go mod download)", dir)
	}
	var all []SuiteCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []SuiteCase
		if err := json.Unmarshal(b, &cases); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range cases {
			cases[i].File = draft + "/" + filepath.Base(f)
		}
		all = append(all, cases...)
	}
	return all
}
