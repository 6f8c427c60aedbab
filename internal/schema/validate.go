package schema

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one thing wrong with an instance: where (a path such as
// root.items[2].name) and what, in words a model can act on.
type Problem struct {
	Path    string
	Message string
}

// Result is the outcome of one validation.
type Result struct {
	// Problems lists what is wrong, at most MaxProblems; none when valid.
	Problems []Problem
	// Omitted counts problems left out beyond MaxProblems.
	Omitted int
	// Steps is the work the validation took (see DefaultMaxSteps).
	Steps int64
	// Exceeded is set when the validation stopped at MaxSteps or
	// MaxEvalDepth; Problems then says so, and the instance counts as
	// invalid.
	Exceeded bool
}

// Valid reports whether the instance satisfied the schema.
func (r Result) Valid() bool { return len(r.Problems) == 0 && !r.Exceeded }

// MaxProblems caps the problems one Result lists.
const MaxProblems = 20

// Validate checks v, a value decoded by encoding/json with UseNumber,
// against s. root names the instance in problem paths ("arguments"). It
// never takes more than the schema's MaxSteps steps or nests deeper than
// its MaxEvalDepth: past either, it stops and says so.
func (s *Schema) Validate(v any, root string) Result {
	inst, err := newValue(v)
	if err != nil {
		return Result{Problems: []Problem{{Path: root, Message: err.Error()}}}
	}
	e := &evaluator{s: s, root: root, max: s.opts.MaxSteps, memo: map[memoKey]outcome{}}
	res := e.eval(s.root, inst, nil, true)
	r := Result{Problems: e.problems, Omitted: e.omitted, Steps: e.steps, Exceeded: e.exceeded}
	if e.exceeded {
		why := fmt.Sprintf("validating these arguments against the tool's schema needs more than %d steps, the limit for one call", s.opts.MaxSteps)
		if e.tooDeep {
			why = fmt.Sprintf("validating these arguments nests the tool's schema deeper than %d levels, the limit for one call", s.opts.MaxEvalDepth)
		}
		r.Problems = []Problem{{Path: root, Message: why + "; nothing ran: send smaller or flatter arguments, or ask the tool's owner for a simpler schema"}}
		r.Omitted = 0
	} else if !res.valid && len(r.Problems) == 0 {
		r.Problems = []Problem{{Path: root, Message: "does not match the schema"}}
	}
	return r
}

type memoKey struct{ n, v int32 }

// outcome is a schema's verdict on one value, with the members and items
// it evaluated (for unevaluatedProperties, unevaluatedItems and closed
// objects).
type outcome struct {
	valid bool
	props bits
	items bits
}

type bits []uint64

func newBits(n int) bits {
	if n == 0 {
		return nil
	}
	return make(bits, (n+63)/64)
}
func (b bits) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bits) has(i int) bool { return b != nil && b[i/64]&(1<<(i%64)) != 0 }
func (b bits) or(o bits) {
	for i := range o {
		if i < len(b) {
			b[i] |= o[i]
		}
	}
}

type scope struct {
	res    *resource
	parent *scope
}

type evaluator struct {
	s        *Schema
	root     string
	steps    int64
	max      int64
	exceeded bool
	tooDeep  bool
	depth    int
	memo     map[memoKey]outcome
	reported map[memoKey]bool
	problems []Problem
	omitted  int
	// quiet counts the evaluations under way whose problems are not
	// wanted (alternatives of anyOf, oneOf, not, if).
	quiet int
}

// full reports whether no further problem will be listed (it counts the
// one the caller found as omitted): callers skip building its message.
func (e *evaluator) full() bool {
	if e.quiet > 0 {
		return true
	}
	if len(e.problems) >= MaxProblems {
		e.omitted++
		return true
	}
	return false
}

func (e *evaluator) add(v *value, format string, args ...any) {
	if e.full() {
		return
	}
	e.problems = append(e.problems, Problem{Path: v.path(e.root), Message: fmt.Sprintf(format, args...)})
}

// addMember lists a problem of an object's member name, present or not.
func (e *evaluator) addMember(obj *value, name, format string, args ...any) {
	if e.full() {
		return
	}
	e.problems = append(e.problems, Problem{Path: ChildPath(obj.path(e.root), name), Message: fmt.Sprintf(format, args...)})
}

// charge adds work; it reports false once the budget is spent.
func (e *evaluator) charge(n int64) bool {
	e.steps += n
	if e.steps > e.max {
		e.exceeded = true
	}
	return !e.exceeded
}

// eval applies n to v. With report, it records why v fails (once per
// schema and value); otherwise it stops at the first failure.
func (e *evaluator) eval(n *node, v *value, sc *scope, report bool) outcome {
	if e.exceeded || !e.charge(1) {
		return outcome{}
	}
	if n.boolean != nil {
		if !*n.boolean {
			if report {
				e.add(v, "not allowed here")
			}
			return outcome{}
		}
		return outcome{valid: true}
	}
	memo := n.shared && !n.dynamic && v.id >= 0
	key := memoKey{n.id, v.id}
	if memo {
		o, ok := e.memo[key]
		switch {
		case ok && (o.valid || !report || e.reported[key]):
			return o
		case !ok && report:
			// Decide first, quietly and remembered; explain only a
			// failure, and each failure once.
			if o := e.eval(n, v, sc, false); o.valid || e.exceeded {
				return o
			}
		}
		if report {
			if e.reported == nil {
				e.reported = map[memoKey]bool{}
			}
			e.reported[key] = true
		}
	}
	e.depth++
	if e.depth > e.s.opts.MaxEvalDepth {
		e.exceeded, e.tooDeep = true, true
	}
	o := e.apply(n, v, sc, report)
	e.depth--
	if e.exceeded {
		return outcome{}
	}
	if memo && len(e.memo) < maxMemo {
		e.memo[key] = o
	}
	return o
}

// sub applies a schema in place and merges what it evaluated into o.
func (e *evaluator) inPlace(o *outcome, n *node, v *value, sc *scope, report bool) bool {
	r := e.eval(n, v, sc, report)
	if r.valid {
		e.merge(o, r)
	}
	return r.valid
}

func (e *evaluator) apply(n *node, v *value, sc *scope, report bool) outcome {
	if n.isRoot && (sc == nil || sc.res != n.res) {
		sc = &scope{res: n.res, parent: sc}
	}
	o := outcome{valid: true}
	switch v.kind {
	case kObject:
		o.props = newBits(len(v.keys))
		e.charge(int64(len(o.props)))
	case kArray:
		o.items = newBits(len(v.arr))
		e.charge(int64(len(o.items)))
	}
	fail := func() bool {
		o.valid = false
		return !report // stop at the first failure unless explaining
	}
	if n.ref != nil {
		if !e.inPlace(&o, n.ref, v, e.enter(sc, n.ref), report) && fail() {
			return o
		}
		if n.draft == Draft7 {
			return o
		}
	}
	if n.dynRef != nil {
		t := n.dynRef
		if n.dynName != "" {
			t = e.dynamicTarget(sc, n.dynName, t)
		}
		if !e.inPlace(&o, t, v, e.enter(sc, t), report) && fail() {
			return o
		}
	}
	if !e.assert(n, v, report) && fail() {
		return o
	}
	for _, a := range n.allOf {
		if !e.inPlace(&o, a, v, sc, report) && fail() {
			return o
		}
	}
	if n.anyOf != nil && !e.anyOf(&o, n, v, sc, report) && fail() {
		return o
	}
	if n.oneOf != nil && !e.oneOf(&o, n, v, sc, report) && fail() {
		return o
	}
	if n.not != nil {
		e.quiet++
		r := e.eval(n.not, v, sc, false)
		e.quiet--
		if r.valid {
			if report {
				e.add(v, "matches the schema under \"not\" (%s), which it must not", n.not.loc)
			}
			if fail() {
				return o
			}
		}
	}
	if n.ifS != nil {
		e.quiet++
		r := e.eval(n.ifS, v, sc, false)
		e.quiet--
		branch := n.elseS
		if r.valid {
			e.merge(&o, r)
			branch = n.thenS
		}
		if branch != nil && !e.inPlace(&o, branch, v, sc, report) && fail() {
			return o
		}
	}
	switch v.kind {
	case kObject:
		if !e.object(&o, n, v, sc, report) && fail() {
			return o
		}
	case kArray:
		if !e.array(&o, n, v, sc, report) && fail() {
			return o
		}
	}
	return o
}

// merge adds what r evaluated to o, charging its words.
func (e *evaluator) merge(o *outcome, r outcome) {
	e.charge(int64(len(r.props) + len(r.items)))
	o.props.or(r.props)
	o.items.or(r.items)
}

// enter is the scope in which a reference's target is evaluated.
func (e *evaluator) enter(sc *scope, t *node) *scope {
	if sc != nil && sc.res == t.res {
		return sc
	}
	return &scope{res: t.res, parent: sc}
}

// dynamicTarget resolves a $dynamicRef to an anchor: the outermost
// resource of the dynamic scope that declares it, else the static target.
func (e *evaluator) dynamicTarget(sc *scope, name string, static *node) *node {
	var found *node
	for x := sc; x != nil; x = x.parent {
		e.steps++
		if a, ok := x.res.dynAnchors[name]; ok {
			found = a
		}
	}
	if found != nil {
		return found
	}
	return static
}

func (e *evaluator) anyOf(o *outcome, n *node, v *value, sc *scope, report bool) bool {
	matched := false
	e.quiet++
	for _, a := range n.anyOf {
		if e.inPlace(o, a, v, sc, false) {
			matched = true
		}
		if e.exceeded {
			break
		}
	}
	e.quiet--
	if !matched && report {
		e.add(v, "matches none of the %d alternatives (anyOf)%s", len(n.anyOf), e.why(n.anyOf, v, sc))
	}
	return matched
}

func (e *evaluator) oneOf(o *outcome, n *node, v *value, sc *scope, report bool) bool {
	var hits []int
	var first outcome
	e.quiet++
	for i, a := range n.oneOf {
		r := e.eval(a, v, sc, false)
		if r.valid {
			if hits == nil {
				first = r
			}
			hits = append(hits, i+1)
		}
		if e.exceeded {
			break
		}
	}
	e.quiet--
	switch {
	case len(hits) == 1:
		e.merge(o, first)
		return true
	case len(hits) == 0:
		if report {
			e.add(v, "matches none of the %d alternatives (oneOf), and must match exactly one%s", len(n.oneOf), e.why(n.oneOf, v, sc))
		}
	default:
		if report {
			s := make([]string, len(hits))
			for i, h := range hits {
				s[i] = strconv.Itoa(h)
			}
			e.add(v, "matches alternatives %s of oneOf, and must match exactly one", strings.Join(s, ", "))
		}
	}
	return false
}

// why explains failed alternatives: the first problem of each (at most
// three), found by evaluating them again, within the budget.
func (e *evaluator) why(alts []*node, v *value, sc *scope) string {
	if e.quiet > 0 || e.exceeded {
		return ""
	}
	var parts []string
	for i, a := range alts {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(alts)-3))
			break
		}
		sub := &evaluator{s: e.s, root: e.root, max: e.max - e.steps, memo: map[memoKey]outcome{}}
		sub.eval(a, v, sc, true)
		e.steps += sub.steps
		if sub.exceeded {
			break
		}
		if len(sub.problems) > 0 {
			p := sub.problems[0]
			parts = append(parts, fmt.Sprintf("alternative %d: %s: %s", i+1, p.Path, p.Message))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// assert checks the keywords that look at v alone.
func (e *evaluator) assert(n *node, v *value, report bool) bool {
	ok := true
	if n.types != nil && !typeMatches(n.types, v) {
		if report {
			e.add(v, "want %s, got %s", joinOr(n.types), v.describe())
		}
		return false // the rest would only repeat it
	}
	if n.constant != nil && !equal(v, n.constant, &e.steps) {
		if report {
			e.add(v, "want %s, got %s", n.constant.jsonText(), v.describe())
		}
		return false
	}
	if n.enum != nil {
		found := false
		for _, x := range n.enum {
			if equal(v, x, &e.steps) {
				found = true
				break
			}
		}
		if !found {
			if report {
				parts := make([]string, len(n.enum))
				for i, x := range n.enum {
					parts[i] = x.jsonText()
				}
				e.add(v, "want one of %s, got %s", strings.Join(parts, ", "), v.describe())
			}
			return false
		}
	}
	switch v.kind {
	case kNumber:
		d := v.decimal()
		check := func(b *decimal, text string, bad func(int) bool, words string) {
			if b != nil && bad(cmpDecimal(d, *b)) {
				ok = false
				if report {
					e.add(v, "want %s %s, got %s", words, text, v.s)
				}
			}
		}
		check(n.minimum, n.minText, func(c int) bool { return c < 0 }, "at least")
		check(n.maximum, n.maxText, func(c int) bool { return c > 0 }, "at most")
		check(n.exclMin, n.exclMinText, func(c int) bool { return c <= 0 }, "more than")
		check(n.exclMax, n.exclMaxText, func(c int) bool { return c >= 0 }, "less than")
		if n.multipleOf != nil {
			// The remainder is taken 18 digits at a time, each step as long
			// as the divisor: paid before it is computed.
			if !e.charge(int64(len(d.digits)/18+1) * int64(len(n.multipleOf.digits)/18+1)) {
				return false
			}
			if !multipleOf(d, *n.multipleOf) {
				ok = false
				if report {
					e.add(v, "want a multiple of %s, got %s", n.multipleOfText, v.s)
				}
			}
		}
	case kString:
		if n.minLength != absent || n.maxLength != absent {
			e.charge(int64(len(v.s) / 256))
			c := int64(utf8.RuneCountInString(v.s))
			if n.minLength != absent && c < n.minLength {
				ok = false
				if report {
					e.add(v, "want at least %d characters, got %d", n.minLength, c)
				}
			}
			if n.maxLength != absent && c > n.maxLength {
				ok = false
				if report {
					e.add(v, "want at most %d characters, got %d", n.maxLength, c)
				}
			}
		}
		if n.pattern != nil {
			if !e.charge(int64(len(v.s)+1) * n.patternCost / 16) {
				return false // the match would cost more than what is left
			}
			if !n.pattern.MatchString(v.s) {
				ok = false
				if report {
					e.add(v, "want a string matching the pattern %s, got %s", strconv.Quote(n.patternText), v.describe())
				}
			}
		}
	}
	return ok
}

func typeMatches(want []string, v *value) bool {
	for _, t := range want {
		switch {
		case t == "number" && v.kind == kNumber:
			return true
		case t == "integer" && v.isInteger():
			return true
		case t == v.typeName():
			return true
		}
	}
	return false
}

func joinOr(types []string) string {
	ts := make([]string, 0, len(types))
	null := false
	for _, t := range types {
		if t == "null" {
			null = true
			continue
		}
		ts = append(ts, t)
	}
	if null {
		ts = append(ts, "null")
	}
	if len(ts) == 0 {
		return "no value (an empty type list)"
	}
	return strings.Join(ts, " or ")
}

func (e *evaluator) object(o *outcome, n *node, v *value, sc *scope, report bool) bool {
	ok := true
	fail := func() bool {
		ok = false
		return !report
	}
	e.charge(int64(len(n.required)))
	for _, r := range n.required {
		if _, present := v.member(r); !present {
			if report {
				e.addMember(v, r, "missing required field")
			}
			if fail() {
				return false
			}
		}
	}
	count := int64(len(v.keys))
	if n.minProps != absent && count < n.minProps {
		if report {
			e.add(v, "want at least %d fields, got %d", n.minProps, count)
		}
		if fail() {
			return false
		}
	}
	if n.maxProps != absent && count > n.maxProps {
		if report {
			e.add(v, "want at most %d fields, got %d", n.maxProps, count)
		}
		if fail() {
			return false
		}
	}
	e.charge(int64(len(n.dependentRequired) + len(n.depSchemas)))
	for _, d := range n.dependentRequired {
		if _, present := v.member(d.name); !present {
			continue
		}
		for _, r := range d.required {
			if _, has := v.member(r); !has {
				if report {
					e.addMember(v, r, "missing field, required when %s is given", strconv.Quote(d.name))
				}
				if fail() {
					return false
				}
			}
		}
	}
	for _, d := range n.depSchemas {
		if _, present := v.member(d.name); present {
			if !e.inPlace(o, d.n, v, sc, report) && fail() {
				return false
			}
		}
	}
	if n.props != nil {
		// The declared members present, found from the smaller side (a
		// schema of many properties against small objects, or the other
		// way round), in the schema's order.
		var present []int // positions in n.propNames
		if len(v.keys) < len(n.propNames) {
			e.charge(int64(len(v.keys)))
			for _, k := range v.keys {
				if pos, ok := n.propPos[k]; ok {
					present = append(present, pos)
				}
			}
			sort.Ints(present)
		} else {
			e.charge(int64(len(n.propNames)))
			for pos, name := range n.propNames {
				if _, ok := v.member(name); ok {
					present = append(present, pos)
				}
			}
		}
		for _, pos := range present {
			name := n.propNames[pos]
			i := indexOf(v, name)
			o.props.set(i)
			if !e.eval(n.props[name], v.vals[i], sc, report).valid && fail() {
				return false
			}
		}
	}
	if n.patternProp != nil || n.additional != nil || n.propertyNames != nil {
		for i, k := range v.keys {
			if !e.charge(1) {
				return false
			}
			matched := false
			if _, declared := n.props[k]; declared {
				matched = true
			}
			for _, p := range n.patternProp {
				if !e.charge(1 + int64(len(k)+1)*p.cost/16) {
					return false
				}
				if p.re.MatchString(k) {
					matched = true
					o.props.set(i)
					if !e.eval(p.n, v.vals[i], sc, report).valid && fail() {
						return false
					}
				}
			}
			if !matched && n.additional != nil {
				o.props.set(i)
				if isFalse(n.additional) {
					if report {
						e.unknown(n, v.vals[i])
					}
					if fail() {
						return false
					}
				} else if !e.eval(n.additional, v.vals[i], sc, report).valid && fail() {
					return false
				}
			}
			if n.propertyNames != nil {
				name := &value{kind: kString, s: k, id: -1, parent: v.vals[i].parent, key: k}
				if !e.eval(n.propertyNames, name, sc, false).valid {
					if report {
						e.addMember(v, k, "this field's name is not allowed (propertyNames %s)", n.propertyNames.loc)
					}
					if fail() {
						return false
					}
				}
			}
		}
	}
	if n.unevalProps != nil {
		for i := range v.keys {
			if o.props.has(i) {
				continue
			}
			if !e.charge(1) {
				return false
			}
			if isFalse(n.unevalProps) {
				if report {
					e.unknown(n, v.vals[i])
				}
				if fail() {
					return false
				}
			} else if !e.eval(n.unevalProps, v.vals[i], sc, report).valid && fail() {
				return false
			}
			o.props.set(i)
		}
	}
	if n.closed {
		e.charge(int64(len(v.keys)))
		for i := range v.keys {
			if !o.props.has(i) {
				if report {
					e.unknown(n, v.vals[i])
				}
				if fail() {
					return false
				}
			}
		}
	}
	return ok
}

// unknown reports a member an object schema does not take.
func (e *evaluator) unknown(n *node, member *value) {
	if e.full() {
		return
	}
	e.quietAdd(member, n)
}

func (e *evaluator) quietAdd(member *value, n *node) {
	if len(n.propNames) == 0 {
		e.problems = append(e.problems, Problem{Path: member.path(e.root), Message: "unknown field (this object takes no fields)"})
		return
	}
	e.problems = append(e.problems, Problem{Path: member.path(e.root), Message: "unknown field (allowed: " + strings.Join(n.propNames, ", ") + ")"})
}

func isFalse(n *node) bool { return n.boolean != nil && !*n.boolean }

func indexOf(v *value, name string) int {
	lo, hi := 0, len(v.keys)
	for lo < hi {
		m := (lo + hi) / 2
		if v.keys[m] < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (e *evaluator) array(o *outcome, n *node, v *value, sc *scope, report bool) bool {
	ok := true
	fail := func() bool {
		ok = false
		return !report
	}
	count := int64(len(v.arr))
	if n.minItems != absent && count < n.minItems {
		if report {
			e.add(v, "want at least %d items, got %d", n.minItems, count)
		}
		if fail() {
			return false
		}
	}
	if n.maxItems != absent && count > n.maxItems {
		if report {
			e.add(v, "want at most %d items, got %d", n.maxItems, count)
		}
		if fail() {
			return false
		}
	}
	if n.uniqueItems && len(v.arr) > 1 {
		seen := make(map[string]int, len(v.arr))
		var b strings.Builder
		for i, x := range v.arr {
			b.Reset()
			canonical(&b, x)
			if !e.charge(1 + int64(b.Len()/64)) {
				return false
			}
			if j, dup := seen[b.String()]; dup {
				if report {
					e.add(x, "repeats item %d; the items must be unique", j)
				}
				if fail() {
					return false
				}
				break
			}
			seen[b.String()] = i
		}
	}
	i := 0
	for ; i < len(n.prefix) && i < len(v.arr); i++ {
		o.items.set(i)
		if !e.eval(n.prefix[i], v.arr[i], sc, report).valid && fail() {
			return false
		}
	}
	rest := n.items
	if n.draft == Draft7 && n.prefix != nil {
		rest = n.additionalItems
	}
	if rest != nil {
		for ; i < len(v.arr); i++ {
			o.items.set(i)
			if !e.eval(rest, v.arr[i], sc, report).valid && fail() {
				return false
			}
		}
	}
	if n.contains != nil {
		var hits int64
		for j, x := range v.arr {
			e.quiet++
			r := e.eval(n.contains, x, sc, false)
			e.quiet--
			if e.exceeded {
				return false
			}
			if r.valid {
				hits++
				if n.draft == Draft2020 {
					o.items.set(j)
				}
			}
		}
		min := int64(1)
		if n.minContains != absent {
			min = n.minContains
		}
		if hits < min {
			if report {
				if min == 1 {
					e.add(v, "want an item matching %s (contains), found none", n.contains.loc)
				} else {
					e.add(v, "want at least %d items matching %s (contains), found %d", min, n.contains.loc, hits)
				}
			}
			if fail() {
				return false
			}
		}
		if n.maxContains != absent && hits > n.maxContains {
			if report {
				e.add(v, "want at most %d items matching %s (contains), found %d", n.maxContains, n.contains.loc, hits)
			}
			if fail() {
				return false
			}
		}
	}
	if n.unevalItems != nil {
		for j, x := range v.arr {
			if o.items.has(j) {
				continue
			}
			if !e.eval(n.unevalItems, x, sc, report).valid && fail() {
				return false
			}
			o.items.set(j)
		}
	}
	return ok
}

// checkDefaults validates every "default" against the schema it sits in.
func (s *Schema) checkDefaults() error {
	for _, n := range s.nodes {
		if !n.hasAnnot || n.raw == nil {
			continue
		}
		d, err := newValue(n.raw["default"])
		if err != nil {
			return fmt.Errorf("%w: %s: default: %v", ErrInvalid, n.loc, err)
		}
		e := &evaluator{s: s, root: "default", max: s.opts.MaxSteps, memo: map[memoKey]outcome{}}
		e.eval(n, d, nil, true)
		if len(e.problems) > 0 || e.exceeded {
			msg := "exceeds the validation budget"
			if len(e.problems) > 0 {
				msg = e.problems[0].Path + ": " + e.problems[0].Message
			}
			return fmt.Errorf("%w: %s: the default does not satisfy its own schema (%s)", ErrInvalid, n.loc, msg)
		}
	}
	return nil
}
