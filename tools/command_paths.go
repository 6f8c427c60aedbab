package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/callsheet/callsheet/tool"
)

// parseArgPath splits a path declaration (CommandSpec.MutatedPaths,
// TouchedPaths) into the steps it takes from the arguments object, or says
// what is wrong with it. A declaration is an argument name ("path": the
// top-level argument of that name) or a JSON pointer (RFC 6901) starting
// with '/' ("/files/0/path"; "~1" stands for '/' and "~0" for '~' in a
// name). One extension: a "*" step over an array takes every item
// ("/files/*/path"); over an object it is the member named "*".
func parseArgPath(decl string) ([]string, error) {
	switch {
	case decl == "":
		return nil, fmt.Errorf(`is empty: name an argument ("path") or write a JSON pointer ("/files/0/path")`)
	case !strings.HasPrefix(decl, "/"):
		if strings.Contains(decl, "/") {
			return nil, fmt.Errorf(`%q is neither an argument name (it holds '/') nor a JSON pointer (it does not start with '/'): write %q`, decl, "/"+decl)
		}
		return []string{decl}, nil
	}
	steps := strings.Split(decl[1:], "/")
	for i, s := range steps {
		for j := 0; j < len(s); j++ {
			if s[j] == '~' && (j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1')) {
				return nil, fmt.Errorf(`JSON pointer %q has a '~' not followed by 0 or 1 (write ~0 for '~' and ~1 for '/' in a name)`, decl)
			}
		}
		steps[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return steps, nil
}

// argPaths compiles path declarations into the function a tool's
// MutatedPaths or TouchedPaths is: the workspace-relative paths a call's
// arguments name, in declaration order, each once; nil for arguments that
// do not parse. It fails for a declaration that does not parse.
func argPaths(decls []string) (func(json.RawMessage) []string, error) {
	steps := make([][]string, len(decls))
	for i, d := range decls {
		s, err := parseArgPath(d)
		if err != nil {
			return nil, fmt.Errorf("[%d] %w", i, err)
		}
		steps[i] = s
	}
	return func(args json.RawMessage) []string {
		norm, err := tool.NormalizeArguments(args)
		if err != nil {
			return nil
		}
		var v any
		if json.Unmarshal(norm, &v) != nil {
			return nil
		}
		var out []string
		for _, s := range steps {
			for _, p := range reach(v, s) {
				for _, c := range cleanPaths(p) {
					if !slices.Contains(out, c) {
						out = append(out, c)
					}
				}
			}
		}
		return out
	}, nil
}

// reach returns the strings the steps lead to from v: a string found, or
// the strings of an array found.
func reach(v any, steps []string) []string {
	if len(steps) == 0 {
		switch x := v.(type) {
		case string:
			return []string{x}
		case []any:
			var out []string
			for _, e := range x {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		return nil
	}
	step, rest := steps[0], steps[1:]
	switch x := v.(type) {
	case map[string]any:
		if e, ok := x[step]; ok {
			return reach(e, rest)
		}
	case []any:
		if step == "*" {
			var out []string
			for _, e := range x {
				out = append(out, reach(e, rest)...)
			}
			return out
		}
		if i, ok := arrayIndex(step); ok && i < len(x) {
			return reach(x[i], rest)
		}
	}
	return nil
}

// arrayIndex reads a JSON pointer array index: digits without a leading
// zero.
func arrayIndex(step string) (int, bool) {
	if step == "" || (len(step) > 1 && step[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(step)
	return i, err == nil && i >= 0
}

// checkArgPath checks a declaration against the input schema, so that a
// typo or a path to a number is refused at start-up rather than naming no
// file at every call: each step must be a property the schema allows (or
// an index or "*" of an array), and what it reaches a string or an array of
// strings. Where the schema does not say (no type, $ref, combinators, a
// free-form object), the declaration is accepted as written.
func checkArgPath(s *jsonschema.Schema, decl string) error {
	steps, err := parseArgPath(decl)
	if err != nil {
		return err
	}
	at := ""
	for _, step := range steps {
		if s == nil || opaque(s) {
			return nil
		}
		switch {
		case s.Properties != nil || hasType(s, "object"):
			if p, ok := s.Properties[step]; ok {
				s = p
			} else if s.AdditionalProperties != nil && !isFalse(s.AdditionalProperties) {
				s = s.AdditionalProperties
			} else if s.Properties == nil || s.PatternProperties != nil {
				return nil // a free-form object: any name may be there
			} else {
				names := make([]string, 0, len(s.Properties))
				for n := range s.Properties {
					names = append(names, n)
				}
				sort.Strings(names)
				return fmt.Errorf("%q: the input schema has no property %q at %s (properties: %s)", decl, step, where(at), strings.Join(names, ", "))
			}
		case s.Items != nil || hasType(s, "array"):
			if _, ok := arrayIndex(step); !ok && step != "*" {
				return fmt.Errorf("%q: %s is an array: step into it with an index or *, not %q", decl, where(at), step)
			}
			s = s.Items
		case schemaType(s) != "":
			return fmt.Errorf("%q: %s is %s, so it has no %q inside", decl, where(at), article(schemaType(s)), step)
		default:
			return nil
		}
		at += "/" + step
	}
	if s == nil || opaque(s) {
		return nil
	}
	switch typ := schemaType(s); {
	case typ == "" || typ == "string":
		return nil
	case typ == "array":
		if it := schemaType(s.Items); s.Items != nil && it != "" && it != "string" && !opaque(s.Items) {
			return fmt.Errorf("%q: %s is an array of %s; a path declaration needs a string or an array of strings", decl, where(at), it)
		}
		return nil
	default:
		return fmt.Errorf("%q: %s is %s; a path declaration needs a string or an array of strings", decl, where(at), article(typ))
	}
}

// checkEscalate checks that a tool declaring escalation can be called with
// "escalate": true: its schema must take a boolean "escalate" (or leave the
// arguments open), since a strict schema would otherwise refuse every
// escalated call as invalid arguments.
func checkEscalate(s *jsonschema.Schema) error {
	if s == nil || opaque(s) || s.Properties == nil || s.PatternProperties != nil {
		return nil
	}
	p, ok := s.Properties["escalate"]
	if !ok {
		if s.AdditionalProperties != nil && !isFalse(s.AdditionalProperties) {
			return nil
		}
		return fmt.Errorf(`escalation is declared, but the input schema has no "escalate" property, so a call could never carry escalate: true; add "escalate": {"type": "boolean", "description": "ask to ..."} to its properties`)
	}
	if typ := schemaType(p); typ != "" && typ != "boolean" {
		return fmt.Errorf(`escalation is declared, but the input schema's "escalate" is %s; make it {"type": "boolean"}`, article(typ))
	}
	return nil
}

// opaque reports a schema whose shape at this point is decided by
// references or combinators, which checkArgPath does not follow.
func opaque(s *jsonschema.Schema) bool {
	return s.Ref != "" || s.DynamicRef != "" || s.AllOf != nil || s.AnyOf != nil || s.OneOf != nil || s.If != nil || (s.Not != nil && !isFalse(s))
}

// isFalse reports the schema that accepts nothing, as jsonschema-go reads
// `false`: {"not": {}}.
func isFalse(s *jsonschema.Schema) bool {
	if s == nil || s.Not == nil || !reflect.ValueOf(*s.Not).IsZero() {
		return false
	}
	t := *s
	t.Not = nil
	return reflect.ValueOf(t).IsZero()
}

// schemaType returns the one type a schema declares, ignoring "null" (an
// optional value); "" when it declares none or several.
func schemaType(s *jsonschema.Schema) string {
	if s == nil {
		return ""
	}
	if s.Type != "" {
		return s.Type
	}
	var ts []string
	for _, t := range s.Types {
		if t != "null" {
			ts = append(ts, t)
		}
	}
	if len(ts) == 1 {
		return ts[0]
	}
	return ""
}

func hasType(s *jsonschema.Schema, typ string) bool {
	return s.Type == typ || slices.Contains(s.Types, typ)
}

// article puts "a" or "an" before a JSON type name.
func article(typ string) string {
	if typ == "integer" || typ == "object" || typ == "array" {
		return "an " + typ
	}
	return "a " + typ
}

func where(at string) string {
	if at == "" {
		return "the arguments object"
	}
	return at
}
