package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/internal/schema"
)

// allOfRefs is allOf of two references to the next level, n levels deep: a
// schema of n lines whose plain evaluation costs 2^n.
func allOfRefs(n int, ref string) string {
	target := "#/$defs/d%d"
	if ref == "$dynamicRef" {
		target = "#a%d" // a dynamic anchor: resolved in the dynamic scope
	}
	var defs []string
	for i := 0; i < n; i++ {
		next := fmt.Sprintf(target, i+1)
		defs = append(defs, fmt.Sprintf(`"d%d": {"$dynamicAnchor": "a%d", "allOf": [{%q: %q}, {%q: %q}]}`, i, i, ref, next, ref, next))
	}
	defs = append(defs, fmt.Sprintf(`"d%d": {"$dynamicAnchor": "a%d", "type": "integer"}`, n, n))
	return `{"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": {` + strings.Join(defs, ", ") + `}}`
}

// TestHostileSchemas: no schema a tenant or an MCP server supplies can
// crash the node or cost more than a bound per registration or per call.
// The bounds are asserted on the validator's step counter, never on time.
func TestHostileSchemas(t *testing.T) {
	t.Run("a reference cycle is refused at registration", func(t *testing.T) {
		for _, s := range []string{
			`{"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}`,
			`{"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}]}}}`,
			`{"type": "object", "$ref": "#"}`,
			`{"type": "object", "properties": {"x": {"not": {"$ref": "#/properties/x"}}}}`,
			`{"type": "object", "properties": {"x": {"$dynamicRef": "#t"}}, "$defs": {"t": {"$dynamicAnchor": "t", "if": {"$dynamicRef": "#t"}}}}`,
		} {
			_, err := compileSchema(json.RawMessage(s))
			if err == nil || !strings.Contains(err.Error(), "reference cycle") || !strings.Contains(err.Error(), "validating would never end") {
				t.Errorf("%s: err=%v, want a reference cycle refused", s, err)
			}
		}
		// A reference that descends into the value is no cycle: a tree.
		v, err := compileSchema(json.RawMessage(`{"type": "object", "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#"}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.validate(json.RawMessage(`{"name": "a", "kids": [{"name": "b", "kids": [{"name": "c"}]}]}`)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("allOf of two references nested n deep costs n, not 2^n", func(t *testing.T) {
		for _, n := range []int{24, 64} {
			v, err := compileSchema(json.RawMessage(allOfRefs(n, "$ref")))
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			_ = json.Unmarshal([]byte(`{"x": 1}`), &obj)
			r := v.s.Validate(obj, "arguments")
			if !r.Valid() || r.Steps > int64(10*n+20) {
				t.Errorf("n=%d valid: %v in %d steps, want valid in at most %d", n, r.Problems, r.Steps, 10*n+20)
			}
			_ = json.Unmarshal([]byte(`{"x": "s"}`), &obj)
			r = v.s.Validate(obj, "arguments")
			if r.Valid() || r.Steps > int64(20*n+20) || len(r.Problems) != 1 {
				t.Errorf("n=%d invalid: %v in %d steps, want one problem in at most %d", n, r.Problems, r.Steps, 20*n+20)
			}
		}
	})
	t.Run("a schema the memo cannot shorten stops at the step budget", func(t *testing.T) {
		// $dynamicRef depends on the dynamic scope, so it is not memoised.
		v, err := compileSchema(json.RawMessage(allOfRefs(64, "$dynamicRef")))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		_ = json.Unmarshal([]byte(`{"x": 1}`), &obj)
		r := v.s.Validate(obj, "arguments")
		if !r.Exceeded || r.Steps > SchemaMaxSteps+100 {
			t.Fatalf("exceeded=%v after %d steps, want stopped at %d", r.Exceeded, r.Steps, SchemaMaxSteps)
		}
		err = v.validate(json.RawMessage(`{"x": 1}`))
		if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), "needs more than 1000000 steps, the limit for one call") {
			t.Fatalf("err=%v, want invalid arguments saying the budget ran out", err)
		}
	})
	t.Run("items nested 4,000 deep is refused before it is decoded", func(t *testing.T) {
		deep := `{"type": "object", "properties": {"x": ` + strings.Repeat(`{"items": `, 4000) + `{}` + strings.Repeat(`}`, 4000) + `}}`
		_, err := compileSchema(json.RawMessage(deep))
		// The byte named is where the scan stopped: at the 65th level, not
		// after reading the whole schema.
		if err == nil || !strings.Contains(err.Error(), "nests deeper than 64 levels (at byte 659)") {
			t.Fatalf("err=%v, want refused at the 65th level", err)
		}
	})
	t.Run("a schema with too many values is refused before it is decoded", func(t *testing.T) {
		big := `{"type": "object", "properties": {"x": {"enum": [` + strings.Repeat(`0, `, SchemaMaxNodes) + `0]}}}`
		_, err := compileSchema(json.RawMessage(big))
		if err == nil || !strings.Contains(err.Error(), "more than 50000 values") {
			t.Fatalf("err=%v, want too large", err)
		}
	})
	t.Run("a pattern's size is bounded, and a match over the budget is refused", func(t *testing.T) {
		huge := `{"type": "object", "properties": {"x": {"pattern": "` + strings.Repeat(`\\p{L}{100}`, 500) + `"}}}`
		if _, err := compileSchema(json.RawMessage(huge)); err == nil || !strings.Contains(err.Error(), "compiles to 50002 instructions, more than 10000") {
			t.Fatalf("err=%v, want the pattern refused", err)
		}
		v, err := compileSchema(json.RawMessage(`{"type": "object", "properties": {"x": {"pattern": "` + strings.Repeat(`\\p{L}{100}`, 90) + `"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		obj := map[string]any{"x": strings.Repeat("a", 1<<20)}
		// Matching would take seconds: it is charged before it runs.
		if r := v.s.Validate(obj, "arguments"); !r.Exceeded {
			t.Fatalf("valid=%v after %d steps, want the budget exceeded before matching", r.Valid(), r.Steps)
		}
	})
	t.Run("many declared properties against many small objects cost the smaller side", func(t *testing.T) {
		var props []string
		for i := 0; i < 5000; i++ {
			props = append(props, fmt.Sprintf(`"p%d": {"type": "integer"}`, i))
		}
		v, err := compileSchema(json.RawMessage(`{"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "object", "properties": {` + strings.Join(props, ",") + `}}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		xs := make([]any, 20000)
		for i := range xs {
			xs[i] = map[string]any{"p7": json.Number("1")}
		}
		r := v.s.Validate(map[string]any{"xs": xs}, "arguments")
		if !r.Valid() || r.Steps > 10*int64(len(xs)) {
			t.Fatalf("valid=%v in %d steps, want valid in at most %d (5,000 properties looked up 20,000 times would be 10^8)", r.Valid(), r.Steps, 10*len(xs))
		}
	})
	t.Run("a schema over a megabyte is refused before it is decoded", func(t *testing.T) {
		big := `{"type": "object", "description": "` + strings.Repeat("x", SchemaMaxBytes) + `"}`
		if _, err := compileSchema(json.RawMessage(big)); err == nil || !strings.Contains(err.Error(), "more than 1048576") {
			t.Fatalf("err=%v, want too large", err)
		}
	})
	t.Run("deep arguments against a recursive schema stop at the nesting bound", func(t *testing.T) {
		v, err := compileWith(json.RawMessage(`{"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}}, "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}`), schema.Options{CloseObjects: true, MaxEvalDepth: 30})
		if err != nil {
			t.Fatal(err)
		}
		// 40 levels: within MaxArgumentDepth (64), which NormalizeArguments
		// refuses before any schema sees them.
		err = v.validate(json.RawMessage(`{"x": ` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`))
		if err == nil || !strings.Contains(err.Error(), "deeper than 30 levels") {
			t.Fatalf("err=%v, want the nesting bound", err)
		}
	})
}
