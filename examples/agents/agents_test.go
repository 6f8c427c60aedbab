// Package agents_test runs the agent loops of examples/agents, each a full
// loop on a provider's official SDK (openai and @anthropic-ai/sdk on Node
// 22, openai-go and anthropic-sdk-go in Go) whose tools a real node runs,
// against the fake model server (fakemodel), which replays a recorded
// three-step conversation and refuses a request whose tool results the
// provider would refuse. The TypeScript loops are first type-checked with
// tsc --strict against the SDKs and @callsheet/client: they append the
// answers with no conversion.
package agents_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/clienttest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, testnode.Cleanup) }

// final is what every loop's model says last: it read back what it wrote.
const final = "final: notes.txt says: hello from the model"

// fakeModel starts a fresh fake model server (its script from step 0) and
// returns its base URL.
func fakeModel(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Logf("fakemodel:\n%s", stderr.String())
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("fakemodel did not start: %q %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
}

// tsWorkspace lays out a directory where the TypeScript loops run as a
// user's project would: node_modules holds openai and @anthropic-ai/sdk
// (scripts/ensure-native-deps) and @callsheet/client built from
// clients/typescript with the pinned tsc.
func tsWorkspace(t *testing.T, tsc []string) string {
	t.Helper()
	dir := t.TempDir()
	deps := filepath.Join(testenv.NativeDeps(t), "node_modules")
	mods := filepath.Join(dir, "node_modules")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(mods, "@callsheet"), 0o755))
	entries, err := os.ReadDir(deps)
	must(err)
	for _, e := range entries {
		must(os.Symlink(filepath.Join(deps, e.Name()), filepath.Join(mods, e.Name())))
	}
	pkg := filepath.Join(mods, "@callsheet", "client")
	src, _ := filepath.Abs(filepath.Join("..", "..", "clients", "typescript"))
	if out, err := exec.Command(tsc[0], tsc[1], "-p", src, "--outDir", filepath.Join(pkg, "dist")).CombinedOutput(); err != nil {
		t.Fatalf("building @callsheet/client: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(src, "package.json"))
	must(err)
	must(os.WriteFile(filepath.Join(pkg, "package.json"), b, 0o644))
	must(os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"type": "module"}`), 0o644))
	for _, f := range []string{"openai_chat.ts", "openai_responses.ts", "anthropic.ts"} {
		b, err := os.ReadFile(f)
		must(err)
		must(os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	return dir
}

func TestAgentLoops(t *testing.T) {
	tsc := testenv.Tsc(t)
	node22 := testenv.Node22(t)
	env := clienttest.Start(t)
	fake := testnode.Build(t, "examples/agents/fakemodel", "")
	goagent := testnode.Build(t, "examples/agents/goagent", "")
	dir := tsWorkspace(t, tsc)

	check := exec.Command(tsc[0], tsc[1], "--strict", "--exactOptionalPropertyTypes", "--noEmit", "--skipLibCheck",
		"--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--lib", "es2022,dom",
		"openai_chat.ts", "openai_responses.ts", "anthropic.ts")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("tsc --strict on the TypeScript loops: %v\n%s", err, out)
	}
	t.Log("tsc --strict --exactOptionalPropertyTypes on openai_chat.ts, openai_responses.ts, anthropic.ts: no errors")

	for _, tc := range []struct {
		name string
		argv []string
		base string // the SDK's base URL variable and the path under the fake server
	}{
		{"ts openai chat", []string{node22, "openai_chat.ts"}, "OPENAI_BASE_URL=/v1"},
		{"ts openai responses", []string{node22, "openai_responses.ts"}, "OPENAI_BASE_URL=/v1"},
		{"ts anthropic", []string{node22, "anthropic.ts"}, "ANTHROPIC_BASE_URL="},
		{"go openai chat", []string{goagent, "--provider", "openai_chat"}, "OPENAI_BASE_URL=/v1"},
		{"go openai responses", []string{goagent, "--provider", "openai_responses"}, "OPENAI_BASE_URL=/v1"},
		{"go anthropic", []string{goagent, "--provider", "anthropic"}, "ANTHROPIC_BASE_URL="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := fakeModel(t, fake)
			name, path, _ := strings.Cut(tc.base, "=")
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(append(os.Environ(), env.Environ()...), name+"="+url+path)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			t.Logf("%s (%s):\n%s", strings.Join(tc.argv[1:], " "), time.Since(start).Round(time.Millisecond), out)
			if err != nil {
				t.Fatalf("the loop failed: %v", err)
			}
			if !strings.Contains(string(out), final) {
				t.Fatalf("the loop did not end with %q", final)
			}
		})
	}
}
