package tool_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/internal/schema"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/tool"
)

var updateDifferences = flag.Bool("update-differences", false, "rewrite testdata/jsonschema-suite-differences.txt from this run")

// suiteCaseID is the $id a case's schema is given inside a tool's schema
// when it has none of its own, so that its own references ("#/$defs/a",
// "#") still resolve within it.
const suiteCaseID = "https://callsheet.invalid/suite/case.json"

// wrapSuiteSchema makes a suite schema a tool's input schema: arguments
// {"v": DATA} with the case's schema, embedded as a resource of its own,
// applied to v. The draft is the wrapper's "$schema", which the case
// inherits unless it names its own.
func wrapSuiteSchema(t *testing.T, raw json.RawMessage, draftURI string) json.RawMessage {
	t.Helper()
	var c any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	ref := suiteCaseID
	if m, ok := c.(map[string]any); ok {
		if id, ok := m["$id"].(string); ok {
			base, _ := url.Parse("https://callsheet.invalid/schema.json")
			r, err := url.Parse(id)
			if err != nil {
				t.Fatal(err)
			}
			ref = base.ResolveReference(r).String()
		} else {
			m["$id"] = suiteCaseID
		}
	}
	w := map[string]any{
		"$schema":    draftURI,
		"type":       "object",
		"properties": map[string]any{"v": map[string]any{"$ref": ref}},
		"required":   []any{"v"},
	}
	defs := "$defs"
	if strings.Contains(draftURI, "draft-07") {
		defs = "definitions"
	}
	w[defs] = map[string]any{"case": c}
	if _, isBool := c.(bool); isBool || !bytes.Contains(raw, []byte(`"$`)) {
		// No references, ids or anchors: the case is v's schema itself, as
		// in most tools' schemas.
		w["properties"] = map[string]any{"v": c}
		if m, ok := c.(map[string]any); ok {
			delete(m, "$id")
		}
		return mustJSON(t, w)
	}
	return mustJSON(t, w)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// suiteNode is a real node (embedded JetStream, the harness store and
// hub) with a worker that completes every task of the harness tool
// "suite" with "ok".
func suiteNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := config.DefaultConfig()
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg})
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			tasks, err := n.Poll(ctx, config.DefaultTenant, harness.PollRequest{Worker: "suite", Tools: []string{"suite"}, Max: harness.MaxTasks, Wait: time.Second})
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
				continue
			}
			for _, task := range tasks {
				_ = n.TaskComplete(ctx, config.DefaultTenant, task.Task, tool.Text("ok").Parts)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		n.Close()
	})
	return n
}

// TestJSONSchemaTestSuite runs the official JSON Schema Test Suite (draft
// 2020-12 and draft-07) three ways: black-box, each case's schema a harness
// tool registered on a real node and each test a call of a turn (blocked
// invalid_arguments, or run); directly through tool.CompileSchema; and
// through the validator with the strict default off (objects not closed),
// on the case's schema and on the wrapped one. Black-box and direct must
// agree on every test, and the validator without the strict default with
// the suite. Every disagreement of the tool's validator with the suite must
// be one of the deliberate differences of docs/tools/README.md, recognised
// from the run itself and listed one by one in
// testdata/jsonschema-suite-differences.txt (-update-differences rewrites
// it): "remote-ref" (the schema refers to another document, which is never
// fetched: refused at registration) and "closed" (the same validator on
// the same schema, without closing objects, agrees with the suite).
// Anything else fails.
func TestJSONSchemaTestSuite(t *testing.T) {
	n := suiteNode(t)
	ctx := context.Background()
	sess, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	type count struct{ pass, remote, closed, fail int }
	counts := map[string]*count{}
	for _, d := range []struct {
		dir, uri string
		draft    schema.Draft
	}{
		{"draft2020-12", "https://json-schema.org/draft/2020-12/schema", schema.Draft2020},
		{"draft7", "http://json-schema.org/draft-07/schema#", schema.Draft7},
	} {
		cnt := &count{}
		counts[d.dir] = cnt
		for ci, c := range testenv.JSONSchemaSuite(t, d.dir) {
			where := c.File + ": " + c.Description
			pure, perr := schema.Compile(c.Schema, schema.Options{Draft: d.draft})
			wrapped := wrapSuiteSchema(t, c.Schema, d.uri)
			validate, derr := tool.CompileSchema(wrapped)
			wrappedPure, _ := schema.Compile(wrapped, schema.Options{})
			berr := n.PutTool(ctx, config.DefaultTenant, "suite", harness.Spec{
				Description: "A JSON Schema Test Suite case.", Guidelines: []string{"Never."}, InputSchema: wrapped,
				Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe,
			})
			if (derr == nil) != (berr == nil) {
				t.Errorf("%s: CompileSchema says %v, registering the harness tool %v", where, derr, berr)
				continue
			}
			remote := perr != nil && errors.Is(perr, schema.ErrRef) && strings.Contains(perr.Error(), "remote references are never fetched")
			if perr != nil && !remote {
				t.Errorf("%s: the schema is refused: %v", where, perr)
				continue
			}
			if (perr == nil) != (derr == nil) {
				t.Errorf("%s: the validator says %v, CompileSchema %v", where, perr, derr)
				continue
			}
			var results []events.Result
			if derr == nil {
				calls := make([]events.CallSpec, len(c.Tests))
				for i, tc := range c.Tests {
					calls[i] = events.CallSpec{ID: fmt.Sprintf("c%d", i), Name: "suite", Arguments: json.RawMessage(`{"v":` + string(tc.Data) + `}`)}
				}
				turn, err := n.SubmitTurn(ctx, config.DefaultTenant, sess.Session, fmt.Sprintf("%s-%d", d.dir, ci), calls, true)
				if err != nil {
					t.Fatalf("%s: SubmitTurn: %v", where, err)
				}
				results = turn.Results
				if len(results) != len(calls) {
					t.Fatalf("%s: %d results for %d calls", where, len(results), len(calls))
				}
			}
			for i, tc := range c.Tests {
				key := where + " / " + tc.Description
				if remote {
					cnt.remote++
					diffs = append(diffs, key+"\tremote-ref")
					continue
				}
				args := json.RawMessage(`{"v":` + string(tc.Data) + `}`)
				derr := validate(args)
				r := results[i]
				blocked := r.Outcome == events.OutcomeBlocked
				if blocked && r.Block != events.BlockInvalidArguments || !blocked && r.Outcome != events.OutcomeOK {
					t.Errorf("%s: black-box outcome %s/%s %v", key, r.Outcome, r.Block, r.Content)
				}
				if blocked != (derr != nil) {
					t.Errorf("%s: black-box blocked=%v, direct says %v", key, blocked, derr)
				}
				pr := pure.Validate(decodeNumbers(t, tc.Data), "v")
				if pr.Valid() != tc.Valid {
					cnt.fail++
					t.Errorf("%s: the validator says valid=%v, the suite %v (%v)", key, pr.Valid(), tc.Valid, pr.Problems)
					continue
				}
				if (derr == nil) == tc.Valid {
					cnt.pass++
					continue
				}
				// The tool's validator differs from the suite only by
				// closing objects: the same validator without it agrees,
				// on the same wrapped schema, and the tool's refusal names
				// an unknown field, or its acceptance comes from fewer
				// alternatives of a oneOf matching.
				wr := wrappedPure.Validate(decodeNumbers(t, args), "arguments")
				why := fmt.Sprint(derr)
				if derr == nil {
					why = fmt.Sprint(wr.Problems)
				}
				if wr.Valid() != tc.Valid || derr != nil && !strings.Contains(why, "unknown field") || derr == nil && !strings.Contains(why, "oneOf") {
					cnt.fail++
					t.Errorf("%s: CompileSchema says %v, the suite valid=%v, and without closing objects %v", key, derr, tc.Valid, wr.Problems)
					continue
				}
				cnt.closed++
				diffs = append(diffs, key+"\tclosed")
			}
		}
		t.Logf("%s: %d pass, %d deliberate differences (%d remote-ref, %d closed), %d failures", d.dir, cnt.pass, cnt.remote+cnt.closed, cnt.remote, cnt.closed, cnt.fail)
	}
	checkDifferences(t, diffs)
}

// checkDifferences compares the run's deliberate differences with the
// written list, both ways.
func checkDifferences(t *testing.T, diffs []string) {
	t.Helper()
	path := filepath.Join("testdata", "jsonschema-suite-differences.txt")
	sort.Strings(diffs)
	if *updateDifferences {
		header := "# The JSON Schema Test Suite tests on which callsheet deliberately differs (docs/tools/README.md,\n# \"Arguments and JSON Schema\"): FILE: CASE / TEST, a tab, the reason. Written by\n# go test ./tool -run TestJSONSchemaTestSuite -update-differences\n"
		if err := os.WriteFile(path, []byte(header+strings.Join(diffs, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			want[l] = true
		}
	}
	for _, d := range diffs {
		if !want[d] {
			t.Errorf("a difference not in %s: %s", path, d)
		}
		delete(want, d)
	}
	for d := range want {
		t.Errorf("listed in %s but not a difference now: %s", path, d)
	}
}
