package schema

import (
	"errors"
	"fmt"
)

// The bounds that keep any schema, whoever supplies it (a tenant's harness
// tool, an MCP server, a command tool's config), from costing a node more
// than a known amount. Compile checks the first two before it decodes
// anything; every validation runs within the last two.
const (
	// DefaultMaxBytes bounds the size of a schema document.
	DefaultMaxBytes = 1 << 20
	// DefaultMaxDepth bounds the nesting of a schema document, counted in
	// JSON levels (an object or array inside another is one level deeper).
	DefaultMaxDepth = 64
	// DefaultMaxNodes bounds the JSON values of a schema document (objects,
	// arrays, strings, numbers, booleans and nulls, member names and enum
	// members included).
	DefaultMaxNodes = 50_000
	// DefaultMaxSteps bounds the work of one validation: one step per
	// schema applied to one instance value, plus the work of keywords that
	// loop (members, items, enum comparisons, pattern matches, uniqueness),
	// proportionally. A call whose validation needs more is refused.
	DefaultMaxSteps = 1_000_000
	// DefaultMaxEvalDepth bounds how deeply one validation nests schemas
	// applied inside one another.
	DefaultMaxEvalDepth = 10_000
	// maxMemo bounds the remembered results of one validation.
	maxMemo = 1 << 16
	// maxPatternSize bounds the program a pattern compiles to (RE2
	// instructions): matching costs about the string's length times it.
	maxPatternSize = 10_000
)

// Errors Compile returns; each is wrapped with where in the schema and why.
var (
	// ErrInvalid: the document is not a schema of its draft (a keyword with
	// a value of the wrong form, an unknown "$schema", a pattern that does
	// not compile).
	ErrInvalid = errors.New("schema: not a valid schema")
	// ErrTooLarge: the document is larger than MaxBytes, deeper than
	// MaxDepth or has more than MaxNodes values.
	ErrTooLarge = errors.New("schema: too large")
	// ErrRef: a "$ref" or "$dynamicRef" names a document other than this
	// one (remote references are never fetched), or a place it lacks.
	ErrRef = errors.New("schema: unresolvable reference")
	// ErrCycle: references and in-place keywords lead from a schema back to
	// itself without descending into the instance, so validating would
	// never end.
	ErrCycle = errors.New("schema: reference cycle")
)

// prescan checks a document's depth and value count in one pass over its
// bytes, before anything is decoded: a schema over either bound costs no
// more than reading it. It expects JSON (the decoder reports any syntax
// error afterwards).
func prescan(raw []byte, maxDepth, maxNodes int) error {
	depth, nodes := 0, 0
	inString := false
	expectValue := true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if expectValue {
				nodes++
			}
			expectValue = false
		case '{', '[':
			nodes++
			depth++
			if depth > maxDepth {
				return fmt.Errorf("%w: the schema nests deeper than %d levels (at byte %d); flatten it, or name repeated parts once under $defs and $ref them", ErrTooLarge, maxDepth, i)
			}
			expectValue = c == '['
		case '}', ']':
			depth--
			expectValue = false
		case ':', ',':
			expectValue = true
		case ' ', '\t', '\n', '\r':
		default:
			if expectValue {
				nodes++
				expectValue = false
			}
		}
		if nodes > maxNodes {
			return fmt.Errorf("%w: the schema has more than %d values; describe the arguments more briefly", ErrTooLarge, maxNodes)
		}
	}
	return nil
}
