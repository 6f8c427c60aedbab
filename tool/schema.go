package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/internal/schema"
)

// The bounds every input schema is held to, whoever supplies it (a typed Go
// tool, a command tool's config, a tenant's harness tool, an MCP server):
// CompileSchema refuses a deeper or larger schema before decoding it, and
// one validation never takes more than SchemaMaxSteps steps (a call whose
// validation would is refused as invalid arguments, saying so).
const (
	// SchemaMaxBytes bounds a schema's size (a harness tool's is bounded
	// further, by harness.MaxSchemaBytes).
	SchemaMaxBytes = schema.DefaultMaxBytes
	// SchemaMaxDepth bounds a schema's nesting, in JSON levels.
	SchemaMaxDepth = schema.DefaultMaxDepth
	// SchemaMaxNodes bounds a schema's JSON values (keys and enum members
	// included).
	SchemaMaxNodes = schema.DefaultMaxNodes
	// SchemaMaxSteps bounds the work of validating one call's arguments:
	// one step per schema applied to one value, plus the keywords' loops.
	SchemaMaxSteps = schema.DefaultMaxSteps
	// SchemaMaxEvalDepth bounds how deeply one validation nests schemas.
	SchemaMaxEvalDepth = schema.DefaultMaxEvalDepth
)

// CompileSchema compiles a JSON Schema (draft 2020-12, or draft-07 when its
// "$schema" says so) for a tool's arguments into a strict validator. The
// schema's root must have "type": "object", since arguments are always an
// object. It refuses, saying where and why: a document that is not a
// schema of its draft, one larger than SchemaMaxBytes, deeper than
// SchemaMaxDepth or with more than SchemaMaxNodes values, a pattern that
// compiles to more than 10,000 instructions, a "$ref" to another document (remote references
// are never fetched), and references that loop without descending into the
// arguments (validation would never end).
//
// Validation follows the JSON Schema Test Suite, with one deliberate
// difference (docs/tools/README.md, "Arguments and JSON Schema"): unknown
// fields are refused. An object schema that lists "properties" and says
// nothing about other members (no additionalProperties, patternProperties
// or unevaluatedProperties) refuses every member that neither it nor the
// schemas it applies in place (allOf, anyOf, oneOf, if/then/else,
// dependentSchemas, $ref, $dynamicRef) declares; a schema that wants other
// members must say so. Schemas under allOf, if, then, else, not and
// dependentSchemas are parts of a combination and are left as written; an
// object schema without "properties" is a free-form map.
//
// The returned function normalizes its input with NormalizeArguments (so a
// JSON string holding the object is accepted), then checks it. JSON types
// are never coerced: "5" is not an integer, and neither is 1.5 or 1e-1.
// Integers follow JSON Schema's own rule, by value: 5.0, 5e0 and 50e-1 are
// the integer 5. Numbers are compared exactly, as written, with bounds as
// written: minimum 1.1 accepts 1.1, and 1E400 is a number. The error is an
// *ArgumentError listing each problem with its path; defaults are not
// injected. A validation needing more than SchemaMaxSteps steps is refused
// the same way, saying so. The function is safe for concurrent use.
func CompileSchema(raw json.RawMessage) (func(args json.RawMessage) error, error) {
	v, err := compileSchema(raw)
	if err != nil {
		return nil, err
	}
	return v.validate, nil
}

// validator is a compiled, strict argument schema.
type validator struct {
	s *schema.Schema
}

func compileSchema(raw json.RawMessage) (*validator, error) {
	return compileWith(raw, schema.Options{CloseObjects: true})
}

func compileWith(raw json.RawMessage, opts schema.Options) (*validator, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("input schema is empty")
	}
	s, err := schema.Compile(raw, opts)
	if err != nil {
		return nil, fmt.Errorf("input schema: %s", strings.TrimPrefix(err.Error(), "schema: "))
	}
	if t := s.RootTypes(); len(t) != 1 || t[0] != "object" {
		return nil, errors.New(`input schema must have "type": "object" at its root (arguments are always an object)`)
	}
	return &validator{s: s}, nil
}

// prune drops, at every depth, each field that is null where its schema
// says it is optional and does not accept null, and returns the arguments
// again when it dropped any: a model in OpenAI's strict mode sends null for
// every optional field it leaves out (GET /v1/tools?strict=true makes every
// field required and the optional ones nullable), and null there means
// absent. A required field that is null, or one whose schema accepts null,
// is kept and validated as given.
func (v *validator) prune(args json.RawMessage, obj map[string]any) json.RawMessage {
	if !v.s.PruneNulls(obj) {
		return args
	}
	b, err := marshalValue(obj)
	if err != nil {
		return args
	}
	return b
}

// validate is the function CompileSchema returns.
func (v *validator) validate(args json.RawMessage) error {
	_, obj, err := parseArguments(args)
	if err != nil {
		return err
	}
	if ae := v.check(obj); ae != nil {
		return ae
	}
	return nil
}

// check validates a parsed arguments object.
func (v *validator) check(obj map[string]any) *ArgumentError {
	r := v.s.Validate(obj, "arguments")
	if r.Valid() {
		return nil
	}
	ae := &ArgumentError{Omitted: r.Omitted}
	for _, p := range r.Problems {
		ae.Problems = append(ae.Problems, ArgumentProblem{Path: p.Path, Message: p.Message})
	}
	return ae
}
