package permission

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/tool"
)

// Action is a decision.
type Action string

// The three decisions.
const (
	Allow Action = "allow"
	Ask   Action = "ask"
	Deny  Action = "deny"
)

// Rule matches a tool name (a glob: "*" is any run of characters) and,
// optionally, the call's subject (a glob over the shell command, path or URL).
type Rule struct {
	ID     string
	Tool   string
	Match  string
	Action Action
}

// Grant is a standing approval left by an "allow for the session" decision:
// the whole tool (Args empty) or the tool with exactly these arguments.
type Grant struct {
	Tool string
	Args string // compact JSON of the arguments, or "" for any
	ID   string // the ApprovalGranted event that made it
}

// Policy is everything a decision reads. The zero value allows everything.
type Policy struct {
	Strict bool
	// PlanMode admits read-only tools only.
	PlanMode bool
	// Rules are the global rules followed by the agent's: the last match wins.
	Rules  []Rule
	Grants []Grant
}

// Call is one validated call.
type Call struct {
	Tool *tool.Tool
	Args json.RawMessage
	Decl tool.Declarations
	// Escalate is true when the call carries "escalate": true.
	Escalate bool
	// EscalatedBefore is true when an earlier call of the same turn already
	// escalated.
	EscalatedBefore bool
}

// Decision is the outcome with its provenance.
type Decision struct {
	Action Action
	// Rule names what decided: a rule id (or "rule[i]" when it has none),
	// "plan-mode", "strict-default", "default", "grant:<event id>",
	// "escalation".
	Rule   string
	Reason string
}

// Decide returns the decision for one call. It is pure.
func Decide(p Policy, c Call) Decision {
	name := c.Tool.Name
	if p.PlanMode && c.Decl.Effect != tool.EffectReadOnly {
		return Decision{Deny, "plan-mode", fmt.Sprintf("%s is not read-only, and plan mode admits read-only tools only", name)}
	}
	if c.Escalate && c.EscalatedBefore {
		return Decision{Deny, "escalation", "only one escalated call is admitted per turn; ask for this one in a later turn"}
	}
	d := Decision{Allow, "default", ""}
	if p.Strict {
		switch c.Decl.Effect {
		case tool.EffectSideEffecting:
			d = Decision{Ask, "strict-default", fmt.Sprintf("strict mode: %s is side-effecting and needs an approval for each call", name)}
		default:
			d = Decision{Allow, "strict-default", ""}
		}
	}
	// The subject is worked out only for a rule that tests it: decoding the
	// arguments is most of what deciding a call costs when no rule does.
	subject, found := "", false
	for i, r := range p.Rules {
		if !Glob(r.Tool, name) {
			continue
		}
		if r.Match != "" {
			if !found {
				subject, found = Subject(c.Args), true
			}
			if !Glob(r.Match, subject) {
				continue
			}
		}
		id := r.ID
		if id == "" {
			id = fmt.Sprintf("rule[%d]", i)
		}
		d = Decision{r.Action, id, ""}
		switch r.Action {
		case Deny:
			d.Reason = fmt.Sprintf("denied by permission rule %s (%s %q)", id, r.Tool, r.Match)
		case Ask:
			d.Reason = fmt.Sprintf("permission rule %s asks for approval", id)
		}
	}
	if d.Action == Ask && !c.Escalate {
		args := compact(c.Args)
		for _, g := range p.Grants {
			if g.Tool == name && (g.Args == "" || g.Args == args) {
				return Decision{Allow, "grant:" + g.ID, ""}
			}
		}
	}
	if c.Escalate && d.Action == Allow {
		return Decision{Ask, "escalation", fmt.Sprintf("%s asks to run outside the sandbox; escalation is never allowed without an approval", name)}
	}
	return d
}

// subjectKeys are the argument fields a rule's Match is tested against, in
// order of preference.
var subjectKeys = []string{"command", "url", "path", "file_path", "pattern", "query", "goal"}

// Subject returns what a rule's Match is tested against: the first string
// argument among command, url, path, file_path, pattern, query, goal; else
// the compact JSON of the arguments.
func Subject(args json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(args, &m) == nil {
		for _, k := range subjectKeys {
			if s, ok := m[k].(string); ok {
				return s
			}
		}
	}
	return compact(args)
}

func compact(args json.RawMessage) string {
	var b strings.Builder
	var v any
	if json.Unmarshal(args, &v) != nil {
		return string(args)
	}
	out, _ := json.Marshal(v) // map keys sorted: equal arguments compare equal
	b.Write(out)
	return b.String()
}

// CompactArgs is the canonical form of arguments a tool-and-arguments grant
// stores.
func CompactArgs(args json.RawMessage) string { return compact(args) }

// Glob reports whether s matches pattern, where "*" matches any run of
// characters (slashes included) and "?" any one character; everything else
// matches itself.
func Glob(pattern, s string) bool {
	// Iterative matcher with backtracking on the last star.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
