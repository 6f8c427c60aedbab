package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/callsheet/callsheet/internal/jsonread"
)

// Parse reads a configuration from JSON, fills every field it leaves out
// from DefaultConfig, and validates the result. Parsing is strict: the
// document must be one JSON object; unknown fields (field names are matched
// exactly, not case-insensitively), duplicate keys, values of the wrong type
// and trailing data are refused. A value given explicitly is kept, so
// "tool_calls": 0 is an error rather than a request for the default; JSON
// null leaves a default in place.
//
// On failure Parse returns the zero Config and an error wrapping ErrInvalid:
// one *Error for a document that cannot be decoded (with its line and
// column), or every validation problem joined in document order (each *Error
// located at its value, or at the nearest enclosing value when it is
// missing). InputSchema values are stored compacted.
func Parse(data []byte) (Config, error) {
	c, errs := parse(data)
	if len(errs) > 0 {
		return Config{}, join(errs)
	}
	return c, nil
}

// Load reads and parses the configuration file at path (see Parse). Every
// *Error it returns names the file in Error.File. A file that cannot be read
// gives the os error wrapped (errors.Is(err, fs.ErrNotExist) works), not
// ErrInvalid. A relative tenants_file is made relative to the file's
// directory; the tenants file itself is read by LoadTenants.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: read: %w", err)
	}
	c, errs := parse(data)
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = path
		}
		return Config{}, join(errs)
	}
	c.resolveTenantsFile(path)
	return c, nil
}

func parse(data []byte) (Config, []*Error) {
	s := &shape{data: data, offsets: map[string]int64{}}
	if e := s.check(); e != nil {
		return Config{}, []*Error{e}
	}
	c := DefaultConfig()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// check has already refused everything the decoder refuses; this
		// is a backstop, so it reports what it can.
		return Config{}, []*Error{s.decodeError(err)}
	}
	for i := range c.CommandTools {
		if raw := c.CommandTools[i].InputSchema; len(raw) > 0 {
			var b bytes.Buffer
			if json.Compact(&b, raw) == nil {
				c.CommandTools[i].InputSchema = json.RawMessage(b.Bytes())
			}
		}
	}
	errs := c.validate()
	for _, e := range errs {
		if off, ok := s.locate(e.Path); ok {
			e.Line, e.Column = s.position(off)
		}
	}
	return c, errs
}

// shape checks a document against the shape of Config before it is decoded,
// which lets it name the exact path and position of an unknown field, a
// duplicate key or a value of the wrong type (encoding/json names none of
// these precisely). It records where each value starts, so validation errors
// can be located too.
type shape struct {
	data    []byte
	r       *jsonread.Reader
	offsets map[string]int64 // JSON path → offset of the value's first byte
	lines   []int64          // offsets at which lines start; built on first use
}

var (
	durationType = reflect.TypeFor[Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

func (s *shape) check() *Error {
	if len(bytes.TrimSpace(s.data)) == 0 {
		return &Error{Reason: "the document is empty (want a JSON object; {} gives every default)"}
	}
	// Syntax first, in one pass: encoding/json's full-document check gives
	// consistent offsets, which the token stream does not.
	if err := json.Unmarshal(s.data, new(json.RawMessage)); err != nil {
		return s.syntaxError(err)
	}
	// Duplicate keys are refused by the reader, anywhere, raw values (a
	// command tool's input_schema) included.
	s.r = jsonread.New(s.data, jsonread.UseNumber(), jsonread.Members(joinKey))
	tok, err := s.r.Token()
	start := s.r.Offset()
	if err != nil {
		return s.tokenError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		line, col := s.position(start)
		return &Error{Line: line, Column: col, Reason: fmt.Sprintf("want a JSON object, got %s", describe(tok))}
	}
	s.offsets[""] = start
	if e := s.object(reflect.TypeFor[Config](), ""); e != nil {
		return e
	}
	if _, err := s.r.Token(); err != io.EOF {
		line, col := s.position(s.r.Offset())
		return &Error{Line: line, Column: col, Reason: "unexpected data after the configuration object (a file holds exactly one JSON object)"}
	}
	return nil
}

// value checks the next value against type t, at path.
func (s *shape) value(t reflect.Type, path string) *Error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := s.r.Token()
	start := s.r.Offset()
	if err != nil {
		return s.tokenError(err)
	}
	s.offsets[path] = start
	if tok == nil {
		return nil // null leaves the default, or sets nil
	}
	wrong := func(want string) *Error {
		if d, ok := tok.(json.Delim); ok {
			if e := s.skip(d); e != nil {
				return e
			}
		}
		return s.errorAt(start, path, fmt.Sprintf("want %s, got %s", want, describe(tok)))
	}
	switch {
	case t == rawType:
		if d, ok := tok.(json.Delim); ok {
			return s.skip(d)
		}
		return nil
	case t == durationType:
		if _, ok := tok.(json.Delim); ok {
			return wrong(`a duration such as "5s"`)
		}
		if _, reason := durationOf(tok); reason != "" {
			return s.errorAt(start, path, reason)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return wrong("an object")
		}
		return s.object(t, path)
	case reflect.Map:
		if tok != json.Delim('{') {
			return wrong("an object")
		}
		for s.r.More() {
			key, _, e := s.key(path)
			if e != nil {
				return e
			}
			if e := s.value(t.Elem(), joinKey(path, key)); e != nil {
				return e
			}
		}
		return s.close()
	case reflect.Slice:
		if tok != json.Delim('[') {
			return wrong("an array")
		}
		for i := 0; s.r.More(); i++ {
			if e := s.value(t.Elem(), path+"["+strconv.Itoa(i)+"]"); e != nil {
				return e
			}
		}
		return s.close()
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return wrong("true or false")
		}
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return wrong("a string")
		}
	case reflect.Int:
		n, ok := tok.(json.Number)
		if !ok {
			return wrong("a number")
		}
		if _, err := strconv.ParseInt(string(n), 10, strconv.IntSize); err != nil {
			if isRangeErr(err) {
				return s.errorAt(start, path, fmt.Sprintf("%s is out of range", n))
			}
			return s.errorAt(start, path, fmt.Sprintf("want a whole number, got %s", n))
		}
	case reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return wrong("a number")
		}
		if _, err := strconv.ParseFloat(string(n), 64); err != nil {
			return s.errorAt(start, path, fmt.Sprintf("%s is out of range", n))
		}
	default:
		// Not a kind Config uses; leave it to the decoder.
		if d, ok := tok.(json.Delim); ok {
			return s.skip(d)
		}
	}
	return nil
}

// object checks the members of an object whose '{' has been read against
// struct type t.
func (s *shape) object(t reflect.Type, path string) *Error {
	fields := jsonFields(t)
	for s.r.More() {
		key, at, e := s.key(path)
		if e != nil {
			return e
		}
		ft, ok := fields[key]
		if !ok {
			return s.errorAt(at, joinKey(path, key), unknownField(key, t))
		}
		if e := s.value(ft, joinKey(path, key)); e != nil {
			return e
		}
	}
	return s.close()
}

// key reads an object key (the reader refuses a duplicate).
func (s *shape) key(path string) (string, int64, *Error) {
	tok, err := s.r.Token()
	at := s.r.Offset()
	if err != nil {
		return "", at, s.tokenError(err)
	}
	key, ok := tok.(string)
	if !ok { // the decoder refuses this itself; kept for safety
		return "", at, s.errorAt(at, path, fmt.Sprintf("want an object key, got %s", describe(tok)))
	}
	return key, at, nil
}

// close reads the '}' or ']' that ends the current object or array.
func (s *shape) close() *Error {
	if _, err := s.r.Token(); err != nil {
		return s.tokenError(err)
	}
	return nil
}

// skip consumes the rest of an object or array whose opening d was read.
func (s *shape) skip(d json.Delim) *Error {
	if err := s.r.Skip(d); err != nil {
		return s.tokenError(err)
	}
	return nil
}

// tokenError converts an error of the reader: a duplicate key, located at
// the second one, or a syntax error.
func (s *shape) tokenError(err error) *Error {
	var dup *jsonread.DuplicateKeyError
	if errors.As(err, &dup) {
		return s.errorAt(dup.Offset, joinKey(dup.Object, dup.Key), "duplicate key (each key may appear once in an object; remove one)")
	}
	return s.syntaxError(err)
}

func (s *shape) errorAt(off int64, path, reason string) *Error {
	line, col := s.position(off)
	return &Error{Line: line, Column: col, Path: path, Reason: reason}
}

func (s *shape) syntaxError(err error) *Error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se) && strings.Contains(se.Error(), "after top-level value"):
		line, col := s.position(se.Offset - 1)
		return &Error{Line: line, Column: col, Reason: "unexpected data after the configuration object (a file holds exactly one JSON object)"}
	case errors.As(err, &se) && !strings.Contains(se.Error(), "unexpected end"):
		// Offset counts the bytes read including the offending one.
		line, col := s.position(se.Offset - 1)
		return &Error{Line: line, Column: col, Reason: "invalid JSON: " + strings.TrimPrefix(se.Error(), "json: ")}
	case se != nil || err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		line, col := s.position(int64(len(s.data)))
		return &Error{Line: line, Column: col, Reason: "invalid JSON: unexpected end of input (an object or array is not closed)"}
	}
	return &Error{Reason: "invalid JSON: " + err.Error()}
}

// decodeError converts an encoding/json error the shape check let through.
func (s *shape) decodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	var ce *Error
	switch {
	case errors.As(err, &te):
		line, col := s.position(te.Offset)
		return &Error{Line: line, Column: col, Path: te.Field, Reason: fmt.Sprintf("want %s, got %s", te.Type, te.Value)}
	case errors.As(err, &ce):
		return ce
	}
	if e := s.syntaxError(err); e.Line > 0 {
		return e
	}
	return &Error{Reason: strings.TrimPrefix(err.Error(), "json: ")}
}

// position converts a byte offset to a 1-based line and column (in bytes).
func (s *shape) position(off int64) (line, col int) {
	off = max(0, min(off, int64(len(s.data))))
	if s.lines == nil {
		s.lines = []int64{0}
		for i, b := range s.data {
			if b == '\n' {
				s.lines = append(s.lines, int64(i+1))
			}
		}
	}
	// The last line start at or before off.
	i, found := slices.BinarySearch(s.lines, off)
	if !found {
		i--
	}
	return i + 1, int(off-s.lines[i]) + 1
}

// locate finds where the value at path, or else its nearest recorded
// enclosing value, starts. A validation error about a missing field is
// thereby placed at the object that lacks it.
func (s *shape) locate(path string) (int64, bool) {
	for {
		if off, ok := s.offsets[path]; ok && path != "" {
			return off, true
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return 0, false
		}
		path = path[:i]
	}
}

// jsonFields maps the JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

func unknownField(key string, t reflect.Type) string {
	names := make([]string, 0, t.NumField())
	for name := range jsonFields(t) {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf("unknown field %q (field names are case-sensitive: did you mean %q?)", key, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return fmt.Sprintf("unknown field %q (known fields: %s)", key, strings.Join(names, ", "))
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinKey appends an object key to a JSON path: `a.b`, or `a["b c"]` for a
// key that is not a plain name.
func joinKey(path, key string) string {
	if !simpleKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a JSON token or decoded value for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + string(v)
	case float64:
		return "the number " + strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		if r := []rune(v); len(r) > 60 {
			v = string(r[:60]) + "…"
		}
		return "the string " + strconv.Quote(v)
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "the delimiter " + strconv.Quote(v.String())
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%v", v)
}
