package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/internal/schema"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
)

// hostileAllOf is allOf of two references to the next level, n deep.
func hostileAllOf(n int, ref string) string {
	var defs []string
	for i := 0; i < n; i++ {
		next := fmt.Sprintf("#/$defs/d%d", i+1)
		if ref == "$dynamicRef" {
			next = fmt.Sprintf("#a%d", i+1)
		}
		defs = append(defs, fmt.Sprintf(`"d%d": {"$dynamicAnchor": "a%d", "allOf": [{%q: %q}, {%q: %q}]}`, i, i, ref, next, ref, next))
	}
	defs = append(defs, fmt.Sprintf(`"d%d": {"$dynamicAnchor": "a%d", "type": "integer"}`, n, n))
	return `{"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": {` + strings.Join(defs, ", ") + `}}`
}

// TestRestartDoesNotWaitOnTenantSchemas: a node whose tenant registered
// five hostile harness tools (three today's checks accept, two stored as
// a node without them accepted them) compiles none of their schemas when
// it starts again (the same work as a restart without them), serves at
// once, and blocks each tool's calls as invalid arguments, each within the
// bounds.
func TestRestartDoesNotWaitOnTenantSchemas(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	start := func() (*node.Node, int64) {
		t.Helper()
		before := schema.Compiles()
		n, err := node.New(context.Background(), node.Options{DataDir: dir, Config: &cfg})
		if err != nil {
			t.Fatalf("node.New: %v", err)
		}
		return n, schema.Compiles() - before
	}
	n, _ := start()
	n.Close()
	n, plain := start() // a restart with no tenant tool: the baseline

	var wide []string
	for i := 0; len(strings.Join(wide, ",")) < 60<<10; i++ {
		wide = append(wide, fmt.Sprintf(`"field%d": {"type": "string", "maxLength": 10}`, i))
	}
	accepted := map[string]string{
		"allof_ref":     hostileAllOf(64, "$ref"),
		"allof_dynamic": hostileAllOf(64, "$dynamicRef"),
		"wide":          `{"type": "object", "properties": {` + strings.Join(wide, ",") + `}}`,
	}
	spec := func(s string) harness.Spec {
		return harness.Spec{Description: "hostile", Guidelines: []string{"never"}, InputSchema: json.RawMessage(s)}
	}
	ctx := context.Background()
	for name, s := range accepted {
		if err := n.PutTool(ctx, config.DefaultTenant, name, spec(s)); err != nil {
			t.Fatalf("PutTool %s: %v", name, err)
		}
	}
	// Registrations an older node accepted, which today's checks refuse,
	// written into the registrations bucket as it wrote them.
	stored := map[string]string{
		"items_deep": `{"type": "object", "properties": {"x": ` + strings.Repeat(`{"items": `, 4000) + `{}` + strings.Repeat(`}`, 4000) + `}}`,
		"cycle":      `{"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}`,
	}
	for name, s := range stored {
		if err := n.PutTool(ctx, config.DefaultTenant, name, spec(s)); err == nil {
			t.Fatalf("PutTool %s accepted a schema today's checks refuse", name)
		}
		putRaw(t, n, config.DefaultTenant+"."+name, spec(s))
	}
	n.Close()

	n, compiled := start()
	defer n.Close()
	if compiled != plain {
		t.Fatalf("the restart compiled %d schemas, a restart without the tenant's tools %d: it waited on the tenant's schemas", compiled, plain)
	}
	if got := len(n.Registry().TenantTools(config.DefaultTenant)); got != 5 {
		t.Fatalf("%d tenant tools after the restart, want 5", got)
	}
	sess, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"allof_ref":     "arguments.x: want integer, got number 1.5",
		"allof_dynamic": "needs more than 1000000 steps, the limit for one call",
		"wide":          "arguments.nope: unknown field",
		"items_deep":    "the tool's input schema cannot be used, so no call of it runs (input schema: too large: the schema nests deeper than 64 levels",
		"cycle":         "the tool's input schema cannot be used, so no call of it runs (input schema: reference cycle",
	}
	var calls []events.CallSpec
	for name := range want {
		args := `{"x": 1.5}`
		if name == "wide" {
			args = `{"nope": 1}`
		}
		calls = append(calls, events.CallSpec{ID: name, Name: name, Arguments: json.RawMessage(args)})
	}
	turn, err := n.SubmitTurn(ctx, config.DefaultTenant, sess.Session, "t1", calls, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range turn.Results {
		text := ""
		for _, p := range r.Content {
			text += p.Text
		}
		if r.Outcome != events.OutcomeBlocked || r.Block != events.BlockInvalidArguments || !strings.Contains(text, want[r.ID]) {
			t.Errorf("%s: %s/%s %q, want blocked invalid_arguments saying %q", r.ID, r.Outcome, r.Block, text, want[r.ID])
		}
	}
}

// putRaw writes a registration into the harness tools bucket directly.
func putRaw(t *testing.T, n *node.Node, key string, sp harness.Spec) {
	t.Helper()
	js := testnode.JetStream(t, n.ClientURL(), n.NATSCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, harness.DefaultToolsBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sp)
	if _, err := kv.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
}
