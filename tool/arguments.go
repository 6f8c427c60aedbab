package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/callsheet/callsheet/internal/jsonread"
)

// ErrInvalidArguments is matched (with errors.Is) by every *ArgumentError:
// arguments that could not be decoded or did not satisfy the tool's schema.
// The scheduler blocks such a call as invalid_arguments; nothing runs.
var ErrInvalidArguments = errors.New("tool: invalid arguments")

// MaxArgumentDepth is how deeply a call's arguments may nest objects and
// arrays, the arguments object itself being level 1: far below
// encoding/json's own 10,000, and far above what a tool's schema needs.
// Deeper arguments are refused (NormalizeArguments; the HTTP API answers
// 400), so no later reader, schema validator or hook meets them.
const MaxArgumentDepth = 64

// maxProblems caps the problems one ArgumentError lists, so a model that sent
// a huge wrong object gets a readable answer rather than a wall of text.
const maxProblems = 20

// ArgumentProblem is one thing wrong with a call's arguments.
type ArgumentProblem struct {
	// Path is where the problem is, as the model would write it:
	// "arguments", "arguments.path", "arguments.items[2].name". It is empty
	// when the problem concerns the encoding of the whole arguments value.
	Path string
	// Message says what is wrong, e.g. `missing required field` or
	// `want integer, got string "10"`.
	Message string
}

// String returns "path: message", or the message alone when Path is empty.
func (p ArgumentProblem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ArgumentError reports arguments that cannot be used: undecodable (for
// example a truncated model response), not an object, or not matching the
// tool's input schema. Its message lists every problem with its JSON path, so
// a model can fix all of them in one retry. It matches ErrInvalidArguments.
type ArgumentError struct {
	// Problems are in a stable order: the order of the schema's properties,
	// then unknown fields sorted by name. At least one.
	Problems []ArgumentProblem
	// Omitted counts problems left out beyond the cap of 20.
	Omitted int
}

// Error lists the problems, separated by "; ".
func (e *ArgumentError) Error() string {
	var b strings.Builder
	b.WriteString("invalid arguments: ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, "; and %d more", e.Omitted)
	}
	return b.String()
}

// Is reports whether target is ErrInvalidArguments.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArguments }

func argError(path, format string, args ...any) *ArgumentError {
	return &ArgumentError{Problems: []ArgumentProblem{{Path: path, Message: fmt.Sprintf(format, args...)}}}
}

// NormalizeArguments turns a call's arguments, as a model provider sent them,
// into one compact JSON object. Providers send either a JSON object or a JSON
// string holding one; empty input, JSON null, and a string that is empty or
// holds null all mean "{}". It refuses, with an *ArgumentError saying what was
// wrong:
//   - bytes that are not JSON, or a string whose content is not JSON (a
//     truncated model response is called out as such);
//   - any value other than an object (after unwrapping one string);
//   - an object in which a field appears twice at any depth, since which one
//     counts would depend on the reader;
//   - objects and arrays nested deeper than MaxArgumentDepth.
//
// Object keys keep their order; nothing else is changed. It is idempotent and
// safe for concurrent use.
func NormalizeArguments(raw json.RawMessage) (json.RawMessage, error) {
	out, _, err := parseArguments(raw)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SameArguments reports whether two calls' arguments are the same, as
// posting a turn id again needs (docs/spec.md §8). Arguments that
// NormalizeArguments accepts are the same when they are equal JSON values,
// as JSON Schema defines equality for "const" and "enum": whitespace, object
// key order and string escapes do not matter, and numbers compare by their
// mathematical value (5, 5.0 and 5e0 are the same number). So arguments sent
// as a string holding an object equal the object, and empty arguments equal
// {}. Arguments it refuses are the same only as byte-identical JSON once
// whitespace is compacted, or as identical bytes when they are not JSON at
// all. It is safe for concurrent use.
func SameArguments(a, b json.RawMessage) bool {
	_, oa, ea := parseArguments(a)
	_, ob, eb := parseArguments(b)
	switch {
	case ea == nil && eb == nil:
		return sameValue(oa, ob)
	case ea == nil || eb == nil:
		return false
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil {
		return bytes.Equal(ca.Bytes(), cb.Bytes())
	}
	return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b))
}

// sameValue compares two values from parseArguments as JSON values:
// objects by their members whatever the order, arrays item by item,
// numbers by value (sameNumber), strings, booleans and null as themselves.
// jsonschema.Equal would do, but it takes a json.Number for a string, so
// {"n": 5} would equal {"n": "5"}.
func sameValue(x, y any) bool {
	switch a := x.(type) {
	case map[string]any:
		b, ok := y.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !sameValue(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := y.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := y.(json.Number)
		return ok && sameNumber(a, b)
	case string:
		b, ok := y.(string)
		return ok && a == b
	case bool:
		b, ok := y.(bool)
		return ok && a == b
	case nil:
		return y == nil
	}
	return false
}

// parseArguments is NormalizeArguments that also returns the decoded object,
// with numbers as json.Number so that integers and fractions stay distinct.
// The returned bytes and object are the caller's own: they alias nothing.
func parseArguments(raw json.RawMessage) (json.RawMessage, map[string]any, error) {
	data := bytes.TrimSpace(raw)
	if len(data) == 0 || string(data) == "null" {
		return json.RawMessage("{}"), map[string]any{}, nil
	}
	// One pass for the arguments it accepts; the token decoder for the rest,
	// and for every message.
	if out, obj, ok := fastParseArguments(data); ok {
		return out, obj, nil
	}
	return parseArgumentsStd(data)
}

// parseArgumentsStd is parseArguments on trimmed, non-empty data, with
// encoding/json's Compact and token decoder: it accepts exactly what
// fastParseArguments accepts, and more slowly, but it is the one that says
// what is wrong.
func parseArgumentsStd(data []byte) (json.RawMessage, map[string]any, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return nil, nil, syntaxProblem(err, "", len(data))
	}
	data = compact.Bytes()
	if data[0] == '"' {
		var inner string
		if err := json.Unmarshal(data, &inner); err != nil {
			return nil, nil, syntaxProblem(err, "", len(data))
		}
		trimmed := strings.TrimSpace(inner)
		if trimmed == "" || trimmed == "null" {
			return json.RawMessage("{}"), map[string]any{}, nil
		}
		compact.Reset()
		if err := json.Compact(&compact, []byte(trimmed)); err != nil {
			return nil, nil, syntaxProblem(err, "inside the string: ", len(trimmed))
		}
		data = compact.Bytes()
	}
	if data[0] != '{' {
		return nil, nil, argError("", "arguments must be a JSON object, got %s; send the fields as an object such as {\"name\": value}", jsonKind(data[0]))
	}
	v, err := jsonread.New(data, jsonread.UseNumber(), jsonread.MaxDepth(MaxArgumentDepth)).Value()
	var dup *jsonread.DuplicateKeyError
	var deep *jsonread.DepthError
	switch {
	case errors.As(err, &dup):
		return nil, nil, argError(childPath(joinPath("arguments", dup.Object), dup.Key), "field appears more than once; send each field once")
	case errors.As(err, &deep):
		return nil, nil, argError(joinPath("arguments", deep.Path), "nested deeper than %d levels of objects and arrays, the most arguments may have (tool.MaxArgumentDepth); send flatter arguments", MaxArgumentDepth)
	case err != nil:
		// Compact already accepted the bytes, so this is unexpected.
		return nil, nil, argError("", "arguments are not valid JSON (%v)", err)
	}
	// The returned slice aliases compact's buffer, which is not reused.
	return json.RawMessage(data), v.(map[string]any), nil
}

// syntaxProblem turns a decoding error into an ArgumentError that says where
// the JSON broke and, for an unexpected end, that the response was probably
// cut short. what says where the text came from when the arguments were
// wrapped in a JSON string ("inside the string: "); size is the length of the
// decoded text, where an unexpected end is (json.Compact reports offset 0).
func syntaxProblem(err error, what string, size int) *ArgumentError {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		if strings.Contains(se.Error(), "unexpected end") {
			return argError("", "arguments are not valid JSON (%sunexpected end at byte %d): the model's response was probably truncated; send the complete arguments object again", what, size)
		}
		return argError("", "arguments are not valid JSON (%s%v at byte %d)", what, se, se.Offset)
	}
	return argError("", "arguments are not valid JSON (%s%v)", what, err)
}

func jsonKind(first byte) string {
	switch first {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// joinPath appends a path jsonread rendered (`a.b`, `["odd key"][2]`) to
// path.
func joinPath(path, rest string) string {
	if rest == "" || strings.HasPrefix(rest, "[") {
		return path + rest
	}
	return path + "." + rest
}

// childPath returns the path of an object member: a.b for a key that is an
// identifier (^[A-Za-z_][A-Za-z0-9_]*$), else a["odd key"] (jsonread.Member,
// so argument problems and decoding errors name paths alike).
func childPath(path, key string) string { return jsonread.Member(path, key) }

// indexPath returns the path of an array element: a[i].
func indexPath(path string, i int) string { return jsonread.Index(path, i) }

// decodeStrict decodes a normalized object into dst, refusing fields dst does
// not have, and reports a failure as an ArgumentError.
func decodeStrict(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return argError("", "arguments hold more than one JSON value")
	}
	return nil
}

// decodeProblem translates an encoding/json error into an ArgumentError.
// Schema validation runs first, so this mostly reports values a Go type
// cannot hold (an integer too large for its field).
func decodeProblem(err error) *ArgumentError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		path := "arguments"
		if te.Field != "" {
			path += "." + te.Field
		}
		return argError(path, "want a value that fits %s, got %s", te.Type, te.Value)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ := strconv.Unquote(msg)
		return argError(childPath("arguments", name), "unknown field")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return syntaxProblem(err, "", int(se.Offset))
	}
	return argError("arguments", "%s", strings.TrimPrefix(err.Error(), "json: "))
}
