package schema

// PruneNulls removes from obj (arguments decoded with UseNumber), at every
// depth the schema's properties and items describe, each member that is
// null where its object schema does not require it and its own schema
// does not accept null: what OpenAI's strict mode sends for a field the
// model leaves out. It reports whether it removed any.
func (s *Schema) PruneNulls(obj map[string]any) bool {
	return pruneNulls(s.root, obj, 0)
}

func pruneNulls(n *node, x any, depth int) bool {
	if n == nil || depth > DefaultMaxDepth {
		return false
	}
	if n.ref != nil && n.props == nil && n.items == nil {
		return pruneNulls(n.ref, x, depth+1)
	}
	changed := false
	switch x := x.(type) {
	case map[string]any:
		for k, val := range x {
			ps, declared := n.props[k]
			if !declared {
				continue
			}
			if val == nil && !contains(n.required, k) && !acceptsNull(ps, 0) {
				delete(x, k)
				changed = true
				continue
			}
			changed = pruneNulls(ps, val, depth+1) || changed
		}
	case []any:
		for _, e := range x {
			changed = pruneNulls(n.items, e, depth+1) || changed
		}
	}
	return changed
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// acceptsNull reports whether n may accept null; when it cannot tell
// cheaply it says yes, so that the member is kept and validated.
func acceptsNull(n *node, depth int) bool {
	switch {
	case n == nil || depth > 8:
		return true
	case n.boolean != nil:
		return *n.boolean
	case n.ref != nil:
		return acceptsNull(n.ref, depth+1)
	case n.dynRef != nil:
		return true
	case n.enum != nil:
		for _, e := range n.enum {
			if e.kind == kNull {
				return true
			}
		}
		return false
	case n.constant != nil:
		return n.constant.kind == kNull
	case n.types != nil:
		return contains(n.types, "null")
	}
	for _, alts := range [][]*node{n.anyOf, n.oneOf} {
		if alts != nil {
			for _, a := range alts {
				if acceptsNull(a, depth+1) {
					return true
				}
			}
			return false
		}
	}
	return true
}

// RootTypes returns the "type" of the document's root schema (nil when it
// has none).
func (s *Schema) RootTypes() []string { return s.root.types }
