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

func names(ts []*Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func TestReplaceSetsASourcesTools(t *testing.T) {
	var r Registry
	if err := r.Register(validTool("read")); err != nil {
		t.Fatal(err)
	}
	if err := r.Replace("mcp:fs", []*Tool{validTool("mcp__fs__a"), validTool("mcp__fs__b")}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(r.All()), ","); got != "mcp__fs__a,mcp__fs__b,read" {
		t.Fatalf("All=%s", got)
	}
	if src, _ := r.SourceOf("mcp__fs__a"); src != "mcp:fs" {
		t.Fatalf("SourceOf=%q, want mcp:fs", src)
	}
	oldB, _ := r.Get("mcp__fs__b")
	// The server now lists a and c: b goes, c comes, a is replaced.
	if err := r.Replace("mcp:fs", []*Tool{validTool("mcp__fs__a"), validTool("mcp__fs__c")}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(r.All()), ","); got != "mcp__fs__a,mcp__fs__c,read" {
		t.Fatalf("All after replace=%s", got)
	}
	if _, ok := r.Get("mcp__fs__b"); ok {
		t.Fatal("Get found a removed tool: a new plan would use it")
	}
	// A call planned while b was registered still finds it to run.
	if got, ok := r.Resolve("mcp__fs__b"); !ok || got != oldB {
		t.Fatalf("Resolve(removed)=%v,%v, want the last registered version", got, ok)
	}
	// An empty set removes the source's tools, and nothing else.
	if err := r.Replace("mcp:fs", nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(r.All()), ","); got != "read" {
		t.Fatalf("All after removal=%s", got)
	}
	// Registering the name again brings it back for Get.
	if err := r.Replace("mcp:fs", []*Tool{validTool("mcp__fs__b")}); err != nil {
		t.Fatal(err)
	}
	if now, _ := r.Get("mcp__fs__b"); now == oldB {
		t.Fatal("Get returned the retired version after a new registration")
	}
}

func TestReplaceRefusesWithoutShadowing(t *testing.T) {
	var r Registry
	if err := r.Register(validTool("read")); err != nil {
		t.Fatal(err)
	}
	if err := r.Replace("mcp:a", []*Tool{validTool("mcp__x__t")}); err != nil {
		t.Fatal(err)
	}
	bad := validTool("mcp__b__bad")
	bad.Description = ""
	err := r.Replace("mcp:b", []*Tool{validTool("read"), validTool("mcp__x__t"), validTool("mcp__b__ok"), bad, validTool("mcp__b__ok")})
	if err == nil {
		t.Fatal("Replace accepted names other sources hold")
	}
	for _, want := range []string{`"read"`, "built-in or configured", `"mcp__x__t"`, `source "mcp:a"`, "description", "offers two tools"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !errors.Is(err, ErrInvalidTool) {
		t.Errorf("err=%v, want ErrInvalidTool", err)
	}
	// The good tool applied; the others kept their owners.
	if src, _ := r.SourceOf("mcp__b__ok"); src != "mcp:b" {
		t.Errorf("mcp__b__ok source=%q", src)
	}
	if src, _ := r.SourceOf("read"); src != StaticSource {
		t.Errorf("read source=%q, want static", src)
	}
	if src, _ := r.SourceOf("mcp__x__t"); src != "mcp:a" {
		t.Errorf("mcp__x__t source=%q, want mcp:a", src)
	}
	if err := r.Register(validTool("mcp__b__ok")); err == nil || !strings.Contains(err.Error(), `source "mcp:b"`) {
		t.Errorf("Register over a dynamic tool: err=%v", err)
	}
	if err := r.Replace(StaticSource, nil); !errors.Is(err, ErrInvalidSource) {
		t.Errorf("Replace(static)=%v, want ErrInvalidSource", err)
	}
}

func TestRegistryNotify(t *testing.T) {
	var r Registry
	c := make(chan struct{}, 1)
	r.Notify(c)
	v0 := r.Version()
	if err := r.Replace("s", []*Tool{validTool("a")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(validTool("b")); err != nil { // folded into the pending one
		t.Fatal(err)
	}
	select {
	case <-c:
	default:
		t.Fatal("no notification after a change")
	}
	select {
	case <-c:
		t.Fatal("two notifications pending: Notify must not block or pile up")
	default:
	}
	if r.Version() < v0+2 {
		t.Fatalf("Version=%d, want at least %d", r.Version(), v0+2)
	}
	r.Stop(c)
	_ = r.Replace("s", nil)
	select {
	case <-c:
		t.Fatal("notified after Stop")
	default:
	}
}

// TestRegistryConcurrentReplace registers and removes sources while
// planners read: run under -race, every read sees a whole source (all of
// its tools or none), never half of one.
func TestRegistryConcurrentReplace(t *testing.T) {
	var r Registry
	set := func(i int) []*Tool {
		return []*Tool{validTool(fmt.Sprintf("mcp__s%d__a", i)), validTool(fmt.Sprintf("mcp__s%d__b", i))}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				src := fmt.Sprintf("mcp:s%d", i)
				if k%2 == 0 {
					if err := r.Replace(src, set(i)); err != nil {
						t.Error(err)
						return
					}
				} else if err := r.Replace(src, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		count := map[string]int{}
		for _, tl := range r.All() {
			count[tl.Name[:len("mcp__s0")]]++
		}
		for src, n := range count {
			if n != 2 {
				t.Fatalf("read %d tools of %s: a reader saw half a source", n, src)
			}
		}
		_, _ = r.Resolve("mcp__s1__a")
	}
	close(stop)
	wg.Wait()
}

// TestTenantTools: a tenant's tools are seen only through its own lookups;
// two tenants may use one name; a shared name is refused naming its owner
// and never shadowed; a removed tenant tool still resolves for calls
// planned before.
func TestTenantTools(t *testing.T) {
	r, err := NewRegistry(validTool("read"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Replace("mcp:fs", []*Tool{validTool("mcp__fs__list")}); err != nil {
		t.Fatal(err)
	}
	acme, globex := validTool("lookup"), validTool("lookup")
	acme.Description, globex.Description = "acme's", "globex's"
	if err := r.ReplaceTenant("acme", []*Tool{acme, validTool("charge")}); err != nil {
		t.Fatal(err)
	}
	if err := r.ReplaceTenant("globex", []*Tool{globex}); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.GetFor("acme", "lookup"); !ok || got.Description != "acme's" {
		t.Fatalf("GetFor(acme, lookup) = %v, %v; want acme's tool", got, ok)
	}
	if got, ok := r.GetFor("globex", "lookup"); !ok || got.Description != "globex's" {
		t.Fatalf("GetFor(globex, lookup) = %v, %v; want globex's tool", got, ok)
	}
	if _, ok := r.GetFor("globex", "charge"); ok {
		t.Fatal("globex sees acme's charge")
	}
	if _, ok := r.Get("charge"); ok {
		t.Fatal("Get (shared) sees a tenant's tool")
	}
	if got := names(r.VisibleFor("acme")); strings.Join(got, ",") != "charge,lookup,mcp__fs__list,read" {
		t.Fatalf("VisibleFor(acme) = %v", got)
	}
	if got := names(r.VisibleFor("initech")); strings.Join(got, ",") != "mcp__fs__list,read" {
		t.Fatalf("VisibleFor(initech) = %v", got)
	}
	for _, name := range []string{"read", "mcp__fs__list"} {
		err := r.CheckFor("acme", validTool(name))
		var re *RegistrationError
		if !errors.As(err, &re) || re.Rule != RuleDuplicateName {
			t.Fatalf("CheckFor(%s) = %v, want a duplicate_name refusal", name, err)
		}
		if name == "mcp__fs__list" && !strings.Contains(err.Error(), `"mcp:fs"`) {
			t.Fatalf("refusal %q does not name the owner", err)
		}
		if err := r.ReplaceTenant("acme", []*Tool{validTool(name)}); err == nil {
			t.Fatalf("ReplaceTenant took the shared name %s", name)
		}
		if got, _ := r.GetFor("acme", name); got.Description == "acme's" {
			t.Fatalf("a tenant tool shadows %s", name)
		}
	}
	// The last ReplaceTenant left acme without tools: both resolve still.
	if _, ok := r.GetFor("acme", "charge"); ok {
		t.Fatal("charge still registered after ReplaceTenant without it")
	}
	if got, ok := r.ResolveFor("acme", "lookup"); !ok || got.Description != "acme's" {
		t.Fatalf("ResolveFor(acme, lookup) after removal = %v, %v; want the last version", got, ok)
	}
	if _, ok := r.ResolveFor("globex", "charge"); ok {
		t.Fatal("ResolveFor(globex) finds acme's removed tool")
	}
	if err := r.ReplaceTenant("", nil); !errors.Is(err, ErrInvalidSource) {
		t.Fatalf("ReplaceTenant(\"\") = %v, want ErrInvalidSource", err)
	}
}
