package api

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

// resultStamp is the time the suite appends to each result directory.
var resultStamp = regexp.MustCompile(`-\d{4}-\d\d-\d\dT[\d-]+Z$`)

// conformanceApplies are the server scenarios of the official MCP
// conformance suite (@modelcontextprotocol/conformance@0.1.16) that test
// what callsheet's /mcp offers: the handshake, ping, the tool list,
// logging/setLevel (advertised), several SSE streams on one session, and
// DNS-rebinding protection. The others call fixture tools, prompts and
// resources (test_simple_text, test_prompt_with_arguments, ...) that a
// conformance test server defines and callsheet does not have.
var conformanceApplies = []string{
	"server-initialize", "ping", "tools-list", "logging-set-level",
	"server-sse-multiple-streams", "dns-rebinding-protection",
}

// TestMCPConformance runs the conformance suite, under Node 22 from
// scripts/ensure-mcp-deps, against /mcp of a real node process (no
// tenants, so on loopback without tokens, as the suite connects), and
// requires every check of the scenarios that apply to pass. It then stops
// the node with SIGTERM while an MCP client holds a session open: the
// shutdown must close it rather than wait on its stream.
func TestMCPConformance(t *testing.T) {
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(t.TempDir(), "data")})
	out := t.TempDir()
	cmd := exec.Command(testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/conformance/dist/index.js"),
		"server", "--url", p.Base+"/mcp", "--spec-version", "2025-11-25", "-o", out)
	cmd.Dir = out
	log, err := cmd.CombinedOutput()
	// The suite exits non-zero because the fixture scenarios fail; the
	// verdicts are in the result files.
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("conformance suite: %v\n%s", err, log)
	}
	verdicts := map[string][]string{} // scenario → statuses of its checks
	dirs, _ := filepath.Glob(filepath.Join(out, "server-*"))
	for _, d := range dirs {
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		b, err := os.ReadFile(filepath.Join(d, "checks.json"))
		if err != nil || json.Unmarshal(b, &checks) != nil {
			continue
		}
		name := resultStamp.ReplaceAllString(strings.TrimPrefix(filepath.Base(d), "server-"), "")
		for _, c := range checks {
			if c.Status == "SUCCESS" || c.Status == "FAILURE" {
				verdicts[name] = append(verdicts[name], c.Status+" "+c.ID+" "+c.ErrorMessage)
			}
		}
	}
	var passed, other []string
	for name, vs := range verdicts {
		ok := len(vs) > 0
		for _, v := range vs {
			ok = ok && strings.HasPrefix(v, "SUCCESS")
		}
		if ok {
			passed = append(passed, name)
		} else {
			other = append(other, name)
		}
	}
	sort.Strings(passed)
	sort.Strings(other)
	t.Logf("conformance: passed %s; not passed (fixtures callsheet does not define): %s", strings.Join(passed, ", "), strings.Join(other, ", "))
	for _, name := range conformanceApplies {
		vs, ok := verdicts[name]
		if !ok {
			t.Errorf("scenario %s did not run\n%s", name, log)
			continue
		}
		for _, v := range vs {
			if !strings.HasPrefix(v, "SUCCESS") {
				t.Errorf("scenario %s: %s", name, v)
			}
		}
	}

	// An MCP client with a session open (and its standalone SSE stream):
	// SIGTERM still stops the node well within its shutdown bound.
	c := sdk.NewClient(&sdk.Implementation{Name: "lingering", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: p.Base + "/mcp", HTTPClient: &http.Client{}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
	p.Stop(t) // fails the test if the node takes 30 s
	if err := p.Err(); err != nil {
		t.Fatalf("node exit: %v\n%s", err, p.Stderr())
	}
}
