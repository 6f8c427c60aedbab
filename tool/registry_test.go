package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// validTool returns a hand-built tool that Register accepts.
func validTool(name string) *Tool {
	return &Tool{
		Name:        name,
		Description: "Does a thing.",
		Guidelines:  []string{"Use it when a thing must be done."},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Run: func(ctx context.Context, args json.RawMessage) (Result, error) {
			return Text("done"), nil
		},
	}
}

func TestRegisterRules(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*Tool)
		nilTool  bool
		wantRule string // "" means accepted
	}{
		{name: "valid", mutate: func(*Tool) {}},
		{name: "nil tool", nilTool: true, wantRule: RuleNilTool},
		{name: "empty name", mutate: func(t *Tool) { t.Name = "" }, wantRule: RuleName},
		{name: "name with space", mutate: func(t *Tool) { t.Name = "read file" }, wantRule: RuleName},
		{name: "name with dot", mutate: func(t *Tool) { t.Name = "mcp.read" }, wantRule: RuleName},
		{name: "name of 65", mutate: func(t *Tool) { t.Name = strings.Repeat("a", 65) }, wantRule: RuleName},
		{name: "name of 64", mutate: func(t *Tool) { t.Name = strings.Repeat("a", 64) }},
		{name: "name with - and _", mutate: func(t *Tool) { t.Name = "plan_get-2" }},
		{name: "empty description", mutate: func(t *Tool) { t.Description = " " }, wantRule: RuleDescription},
		{name: "no guidelines", mutate: func(t *Tool) { t.Guidelines = nil }, wantRule: RuleGuidelines},
		{name: "only blank guidelines", mutate: func(t *Tool) { t.Guidelines = []string{"", "  "} }, wantRule: RuleGuidelines},
		{name: "unknown effect", mutate: func(t *Tool) { t.Effect = "destructive" }, wantRule: RuleDeclarations},
		{name: "unknown replay", mutate: func(t *Tool) { t.Replay = "always" }, wantRule: RuleDeclarations},
		{name: "unknown concurrency", mutate: func(t *Tool) { t.Concurrency = "parallel" }, wantRule: RuleDeclarations},
		{name: "unknown label", mutate: func(t *Tool) { t.Labels = []Label{LabelFinancial, "scary"} }, wantRule: RuleLabels},
		{name: "read-only with mutated paths", mutate: func(t *Tool) {
			t.Effect = EffectReadOnly
			t.MutatedPaths = func(json.RawMessage) []string { return nil }
		}, wantRule: RuleReadOnlyMutatedPaths},
		{name: "read-only with escalation", mutate: func(t *Tool) { t.Effect = EffectReadOnly; t.Escalation = true }, wantRule: RuleReadOnlyEscalation},
		{name: "side-effecting with mutated paths and escalation", mutate: func(t *Tool) {
			t.MutatedPaths = func(json.RawMessage) []string { return nil }
			t.Escalation = true
		}},
		{name: "infinite timeout, undeclared", mutate: func(t *Tool) { t.Timeout = Infinite }, wantRule: RuleInfiniteTimeout},
		{name: "infinite timeout, delegating", mutate: func(t *Tool) { t.Timeout = Infinite; t.Effect = EffectDelegating }, wantRule: RuleInfiniteTimeout},
		{name: "infinite timeout, user-mediated", mutate: func(t *Tool) { t.Timeout = Infinite; t.Effect = EffectUserMediated }},
		{name: "negative timeout", mutate: func(t *Tool) { t.Timeout = -5 * time.Second }, wantRule: RuleNegativeTimeout},
		{name: "missing schema", mutate: func(t *Tool) { t.InputSchema = nil }, wantRule: RuleInputSchema},
		{name: "schema not JSON", mutate: func(t *Tool) { t.InputSchema = json.RawMessage(`{"type":`) }, wantRule: RuleInputSchema},
		{name: "schema not an object", mutate: func(t *Tool) { t.InputSchema = json.RawMessage(`{"type":"array"}`) }, wantRule: RuleInputSchema},
		{name: "schema with remote ref", mutate: func(t *Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"http://example.com/a"}}}`)
		}, wantRule: RuleInputSchema},
		{name: "nil run", mutate: func(t *Tool) { t.Run = nil }, wantRule: RuleRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tl *Tool
			if !tt.nilTool {
				tl = validTool("thing")
				tt.mutate(tl)
			}
			var r Registry
			err := r.Register(tl)
			if tt.wantRule == "" {
				if err != nil {
					t.Fatalf("err=%v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidTool) {
				t.Fatalf("err=%v, want ErrInvalidTool", err)
			}
			var re *RegistrationError
			if !errors.As(err, &re) {
				t.Fatalf("err=%T, want *RegistrationError", err)
			}
			if re.Rule != tt.wantRule {
				t.Fatalf("rule=%q, want %q (%v)", re.Rule, tt.wantRule, err)
			}
			if tl != nil && re.Tool != tl.Name {
				t.Fatalf("tool=%q, want %q", re.Tool, tl.Name)
			}
			if re.Detail == "" || !strings.Contains(err.Error(), tt.wantRule) {
				t.Fatalf("error %q does not name its rule or detail", err)
			}
			if _, ok := r.Get("thing"); ok {
				t.Fatal("refused tool was registered")
			}
		})
	}
}

func TestRegisterDuplicate(t *testing.T) {
	var r Registry
	if err := r.Register(validTool("read")); err != nil {
		t.Fatal(err)
	}
	err := r.Register(validTool("read"))
	var re *RegistrationError
	if !errors.As(err, &re) || re.Rule != RuleDuplicateName || re.Tool != "read" || !errors.Is(err, ErrInvalidTool) {
		t.Fatalf("err=%v, want a duplicate_name RegistrationError for read", err)
	}
}

func TestRegisterNormalizes(t *testing.T) {
	orig := validTool("thing")
	orig.Replay = ReplaySafe
	var r Registry
	if err := r.Register(orig); err != nil {
		t.Fatal(err)
	}
	got, ok := r.Get("thing")
	if !ok {
		t.Fatal("Get: not found")
	}
	want := Declarations{Effect: EffectSideEffecting, Replay: ReplaySafe, Concurrency: ConcurrencyExclusive}
	if got.Declarations != want {
		t.Fatalf("declarations=%+v, want %+v", got.Declarations, want)
	}
	if orig.Effect != "" || orig.Validate != nil {
		t.Fatalf("Register modified its argument: effect=%q validate set=%v", orig.Effect, orig.Validate != nil)
	}
	if got.Validate == nil {
		t.Fatal("Validate not filled from InputSchema")
	}
	if err := got.Validate(json.RawMessage(`{"path":"a"}`)); err != nil {
		t.Fatalf("Validate(valid)=%v", err)
	}
	// The filled validator is strict: the operator schema did not say
	// additionalProperties, so extra fields are refused.
	if err := got.Validate(json.RawMessage(`{"path":"a","x":1}`)); !errors.Is(err, ErrInvalidArguments) {
		t.Fatalf("Validate(extra field)=%v, want ErrInvalidArguments", err)
	}

	// A Validate the tool brings is kept.
	custom := validTool("custom")
	sentinel := errors.New("custom")
	custom.Validate = func(json.RawMessage) error { return sentinel }
	if err := r.Register(custom); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.Get("custom"); !errors.Is(c.Validate(nil), sentinel) {
		t.Fatal("Register replaced the tool's own Validate")
	}
}

func TestRegistryListing(t *testing.T) {
	deferred := validTool("b_deferred")
	deferred.Deferred = true
	r, err := NewRegistry(validTool("c"), deferred, validTool("a"))
	if err != nil {
		t.Fatal(err)
	}
	names := func(ts []*Tool) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.Name)
		}
		return strings.Join(s, ",")
	}
	if got, want := names(r.All()), "a,b_deferred,c"; got != want {
		t.Fatalf("All=%s, want %s", got, want)
	}
	if got, want := names(r.Visible()), "a,c"; got != want {
		t.Fatalf("Visible=%s, want %s", got, want)
	}
	if _, ok := r.Get("missing"); ok {
		t.Fatal("Get(missing) found a tool")
	}
	if _, err := NewRegistry(validTool("x"), validTool("x")); !errors.Is(err, ErrInvalidTool) {
		t.Fatalf("NewRegistry with duplicates: err=%v, want ErrInvalidTool", err)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	// One shared tool into many registries, and many tools into one, at once.
	shared := validTool("shared")
	var one Registry
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var r Registry
			if err := r.Register(shared); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			if err := one.Register(validTool(fmt.Sprintf("t%02d", i))); err != nil {
				errs <- err
			}
			_ = one.All()
			_, _ = one.Get("t00")
		}()
	}
	// Racing registrations of one name: exactly one wins.
	dups := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dups <- one.Register(validTool("contested"))
		}()
	}
	wg.Wait()
	close(errs)
	close(dups)
	for err := range errs {
		t.Errorf("Register: %v", err)
	}
	wins := 0
	for err := range dups {
		if err == nil {
			wins++
		} else if !errors.Is(err, ErrInvalidTool) {
			t.Errorf("contested Register: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("contested name registered %d times, want 1", wins)
	}
	if got := len(one.All()); got != 33 {
		t.Fatalf("len(All)=%d, want 33", got)
	}
}

func TestTypedToolRegisters(t *testing.T) {
	tl, _, _ := newReadTool(t, WithEffect(EffectReadOnly), WithReplay(ReplaySafe))
	var r Registry
	if err := r.Register(tl); err != nil {
		t.Fatalf("Register(typed tool)=%v", err)
	}
	got, _ := r.Get("read")
	if err := got.Validate(json.RawMessage(`{"path":"a"}`)); err != nil {
		t.Fatalf("Validate=%v", err)
	}
}
