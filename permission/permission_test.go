package permission

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/callsheet/callsheet/tool"
)

type shellArgs struct {
	Command  string `json:"command"`
	Escalate bool   `json:"escalate,omitempty"`
}

func mk(t *testing.T, name string, d tool.Declarations, esc bool) *tool.Tool {
	t.Helper()
	opts := []tool.Option{tool.WithGuidelines("test"), tool.WithDeclarations(d)}
	if esc {
		opts = append(opts, tool.WithEscalation())
	}
	tl, err := tool.New(name, "test", func(context.Context, shellArgs) (tool.Result, error) { return tool.Result{}, nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestDecide(t *testing.T) {
	ro := tool.Declarations{Effect: tool.EffectReadOnly}
	se := tool.Declarations{Effect: tool.EffectSideEffecting}
	um := tool.Declarations{Effect: tool.EffectUserMediated}
	dg := tool.Declarations{Effect: tool.EffectDelegating}
	read, shell := mk(t, "read", ro, false), mk(t, "shell", se, true)
	ask, q, task := mk(t, "question", um, false), mk(t, "q2", um, false), mk(t, "task", dg, false)
	_ = q
	cmd := func(c string) json.RawMessage { b, _ := json.Marshal(shellArgs{Command: c}); return b }
	tests := []struct {
		name     string
		p        Policy
		c        Call
		want     Action
		wantRule string
	}{
		{"default allows", Policy{}, Call{Tool: shell, Args: cmd("ls"), Decl: se}, Allow, "default"},
		{"strict asks side effects", Policy{Strict: true}, Call{Tool: shell, Args: cmd("ls"), Decl: se}, Ask, "strict-default"},
		{"strict allows read-only", Policy{Strict: true}, Call{Tool: read, Args: cmd(""), Decl: ro}, Allow, "strict-default"},
		{"strict: user-mediated is no approval surface", Policy{Strict: true}, Call{Tool: ask, Decl: um}, Allow, "strict-default"},
		{"strict: delegating is judged per child call", Policy{Strict: true}, Call{Tool: task, Decl: dg}, Allow, "strict-default"},
		{"rule allows in strict", Policy{Strict: true, Rules: []Rule{{ID: "git", Tool: "shell", Match: "git *", Action: Allow}}},
			Call{Tool: shell, Args: cmd("git push origin/main"), Decl: se}, Allow, "git"},
		{"rule does not match other commands", Policy{Strict: true, Rules: []Rule{{ID: "git", Tool: "shell", Match: "git *", Action: Allow}}},
			Call{Tool: shell, Args: cmd("rm -rf /"), Decl: se}, Ask, "strict-default"},
		{"last match wins", Policy{Rules: []Rule{{ID: "a", Tool: "*", Action: Deny}, {ID: "b", Tool: "shell", Action: Allow}}},
			Call{Tool: shell, Args: cmd("x"), Decl: se}, Allow, "b"},
		{"later deny overrides", Policy{Rules: []Rule{{ID: "b", Tool: "shell", Action: Allow}, {ID: "c", Tool: "sh*", Match: "*rm*", Action: Deny}}},
			Call{Tool: shell, Args: cmd("rm x"), Decl: se}, Deny, "c"},
		{"unnamed rule is numbered", Policy{Rules: []Rule{{Tool: "shell", Action: Ask}}}, Call{Tool: shell, Args: cmd("x"), Decl: se}, Ask, "rule[0]"},
		{"plan mode denies side effects", Policy{PlanMode: true, Rules: []Rule{{Tool: "*", Action: Allow}}}, Call{Tool: shell, Args: cmd("x"), Decl: se}, Deny, "plan-mode"},
		{"plan mode admits read-only", Policy{PlanMode: true}, Call{Tool: read, Decl: ro}, Allow, "default"},
		{"grant covers an ask", Policy{Strict: true, Grants: []Grant{{Tool: "shell", ID: "g1"}}}, Call{Tool: shell, Args: cmd("x"), Decl: se}, Allow, "grant:g1"},
		{"args grant needs equal args", Policy{Strict: true, Grants: []Grant{{Tool: "shell", Args: `{"command":"ls"}`, ID: "g"}}},
			Call{Tool: shell, Args: cmd("pwd"), Decl: se}, Ask, "strict-default"},
		{"args grant matches equal args", Policy{Strict: true, Grants: []Grant{{Tool: "shell", Args: `{"command":"ls"}`, ID: "g"}}},
			Call{Tool: shell, Args: json.RawMessage(`{ "command" : "ls" }`), Decl: se}, Allow, "grant:g"},
		{"escalation turns an allow into an ask", Policy{}, Call{Tool: shell, Args: cmd("x"), Decl: se, Escalate: true}, Ask, "escalation"},
		{"grants never cover escalation", Policy{Strict: true, Grants: []Grant{{Tool: "shell", ID: "g"}}},
			Call{Tool: shell, Args: cmd("x"), Decl: se, Escalate: true}, Ask, "strict-default"},
		{"escalation stays denied", Policy{Rules: []Rule{{Tool: "shell", Action: Deny}}}, Call{Tool: shell, Args: cmd("x"), Decl: se, Escalate: true}, Deny, "rule[0]"},
		{"one escalation per turn", Policy{}, Call{Tool: shell, Args: cmd("x"), Decl: se, Escalate: true, EscalatedBefore: true}, Deny, "escalation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.p, tt.c)
			if d.Action != tt.want || d.Rule != tt.wantRule {
				t.Fatalf("decision=%s by %q, want %s by %q", d.Action, d.Rule, tt.want, tt.wantRule)
			}
			if d.Action != Allow && d.Reason == "" {
				t.Fatalf("a %s decision without a reason", d.Action)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"git *", "git push origin/main", true}, {"git *", "gitx", false}, {"*", "", true},
		{"*.go", "a/b/c.go", true}, {"a?c", "abc", true}, {"a?c", "ac", false}, {"**", "x", true},
		{"https://*.example.com/*", "https://api.example.com/v1", true}, {"exact", "exact", true}, {"exact", "exactly", false},
	} {
		if got := Glob(c.p, c.s); got != c.want {
			t.Errorf("Glob(%q, %q)=%v, want %v", c.p, c.s, got, c.want)
		}
	}
}

func FuzzGlob(f *testing.F) {
	f.Add("git *", "git status")
	f.Add("*a*b*", "xaybz")
	f.Fuzz(func(t *testing.T, p, s string) {
		_ = Glob(p, s)
		if !Glob("*", s) || !Glob(s2p(s), s) {
			t.Fatalf("a literal pattern must match itself: %q", s)
		}
	})
}

// s2p escapes nothing: a string without * or ? is its own pattern.
func s2p(s string) string {
	for _, r := range s {
		if r == '*' || r == '?' {
			return "*"
		}
	}
	return s
}

func FuzzSubject(f *testing.F) {
	f.Add([]byte(`{"command":"ls"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) { _ = Subject(b) })
}
