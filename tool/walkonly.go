package tool

import (
	"encoding/json"
	"reflect"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"
)

// walkCovers reports whether the checker's walk decides s alone: whether
// every value the walk accepts (no problem, no unsure number, no number out
// of the library's range) jsonschema-go accepts too, so that check may skip
// the library pass. It holds for s when s is the false schema (the walk
// refuses whatever reaches it, as the library does), or when s uses only
// these keywords, and the schemas it reaches through properties, items and
// additionalProperties do too:
//
//   - type: the walk counts integers by value, exactly; the library by the
//     converted value (toLibrary), an int64, or a float64 with no fraction.
//     An exact integer converts to one of those, so what the walk calls an
//     integer the library does too, and any number is a "number" to both.
//   - enum, const: both compare the converted value with jsonschema.Equal.
//   - minimum, maximum: the walk compares exactly; the library compares
//     the converted value, an int64 (exact) or the float64 nearest the
//     number. Rounding to nearest is monotonic and a bound is a float64, so
//     a number at or above a minimum rounds to a value at or above it, and
//     likewise below a maximum. A number too small for compareBound sets
//     unsure. (exclusiveMinimum and exclusiveMaximum do not hold this way:
//     1 + 1e-20 is more than 1, but its float64 is 1.)
//   - minLength, maxLength: both count code points of the decoded string.
//   - minItems, maxItems, items without prefixItems, properties, required,
//     and additionalProperties: the walk visits every item, every declared
//     property present, every other member when additionalProperties is a
//     schema, and refuses every other member when it is false; when it is
//     absent, both leave other members alone.
//   - annotations the library never validates a value against: title,
//     description, default (checked when the schema resolves), examples,
//     deprecated, readOnly, writeOnly, $comment; and, at the root only,
//     $schema naming a version the library validates.
//
// Any other keyword, including those jsonschema-go might add later (every
// field of the schema is checked, not a list of the ones it has now), makes
// the answer false, and the library pass runs as before.
// FuzzWalkOnlyAsLibrary holds check to the full path on generated and
// hand-written schemas.
func walkCovers(s *jsonschema.Schema, root bool) bool {
	if s == nil || isFalseSchema(s) {
		return true
	}
	rest := *s
	// The keywords the walk checks as the library does.
	rest.Type, rest.Types, rest.Enum, rest.Const = "", nil, nil, nil
	rest.Minimum, rest.Maximum = nil, nil
	rest.MinLength, rest.MaxLength, rest.MinItems, rest.MaxItems = nil, nil, nil, nil
	rest.Items, rest.Properties, rest.Required, rest.AdditionalProperties = nil, nil, nil, nil
	// Annotations, and the generator's record of the fields' order.
	rest.Title, rest.Description, rest.Default, rest.Examples = "", "", nil, nil
	rest.Deprecated, rest.ReadOnly, rest.WriteOnly, rest.Comment = false, false, false, ""
	rest.PropertyOrder = nil
	if root && knownVersion(rest.Schema) {
		rest.Schema = ""
	}
	if !reflect.ValueOf(rest).IsZero() {
		return false
	}
	for _, p := range s.Properties {
		if !walkCovers(p, false) {
			return false
		}
	}
	return walkCovers(s.Items, false) && walkCovers(s.AdditionalProperties, false)
}

// knownVersion reports whether $schema names a version jsonschema-go
// validates (an unknown one makes every validation fail there).
func knownVersion(v string) bool {
	switch v {
	case "", "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#",
		"https://json-schema.org/draft/2020-12/schema":
		return true
	}
	return false
}

// outOfRange reports whether v holds a number toLibrary refuses: one that is
// neither an int64 nor within float64's range. Such a number fails
// ParseFloat (an int64 never does), so that is the whole test, and it
// allocates nothing for the numbers it accepts.
func outOfRange(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, err := strconv.ParseFloat(string(x), 64)
		return err != nil
	case []any:
		for _, e := range x {
			if outOfRange(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if outOfRange(e) {
				return true
			}
		}
	}
	return false
}

// allStrings reports whether every value of an enum is a string, so that a
// string is in it exactly when it equals one of them.
func allStrings(vals []any) bool {
	for _, v := range vals {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}
