package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
)

// ErrInvalidCommand is wrapped by the error Command returns for a spec that
// cannot become a tool for a reason of its own (no command, a bad
// environment variable, an unknown program); a spec that breaks a rule of
// the tool contract gets the registry's *tool.RegistrationError instead,
// matching tool.ErrInvalidTool.
var ErrInvalidCommand = errors.New("tools: invalid command tool")

// emptyObjectSchema is the input schema of a command tool that declares
// none: no arguments, so the program reads {} on stdin.
const emptyObjectSchema = `{"type":"object","properties":{}}`

// CommandSpec describes a command tool, an operator's tool defined in
// configuration rather than Go (docs/spec.md §6 "command_tools"). Fields mirror the
// tool contract; every declaration left empty takes its strictest value when
// the tool is registered.
type CommandSpec struct {
	// Name, Description, ShortDescription, Guidelines and Snippet are what
	// the model sees; Name, Description and one non-empty guideline are
	// required.
	Name, Description, ShortDescription string
	Guidelines                          []string
	Snippet                             string
	// InputSchema is the JSON Schema of the arguments object; its root must
	// be "type": "object", and it is strict (see tool.CompileSchema: an
	// object with properties refuses unknown fields). Empty means no
	// arguments.
	InputSchema json.RawMessage
	// Command is the program and its fixed arguments. A program without a
	// slash is looked up in the node's PATH when the tool is built; one with
	// a slash is relative to the workspace. The call's arguments never reach
	// the command line.
	Command []string
	// Effect, Replay and Concurrency are the declarations, as their
	// contract names ("side_effecting", "never", "exclusive", ...).
	Effect, Replay, Concurrency string
	// Labels are effect labels ("irreversible", "financial", "external",
	// "affects_others").
	Labels []string
	// Timeout is the hard per-call timeout; 0 means tool.DefaultTimeout
	// (120 s).
	Timeout time.Duration
	// Env adds variables to the process's minimal environment; it may not
	// set the CALLSHEET_ variables, which belong to the call.
	Env map[string]string
	// FleetCap and FleetCapScope bound the tool's calls across the fleet
	// (tool.Tool.FleetCap); 0 means no cap.
	FleetCap      int
	FleetCapScope string
	// Unsandboxed runs the program outside the sandbox, with the node's
	// rights (the config's "sandbox": false). Default false: the program
	// runs in Box, as shell commands do.
	Unsandboxed bool
	// Box is the sandbox the program runs in; nil uses DefaultSandbox.
	Box *sandbox.Sandbox

	// SelfConcurrency, when ≥ 2, lets that many calls of this (exclusive)
	// tool overlap each other while staying exclusive with every other
	// tool; 0 or 1 means one at a time (docs/spec.md §1).
	SelfConcurrency int
	// Deferred keeps the tool out of the model's tool list; tool_search
	// finds it.
	Deferred bool
	// MutatedPaths and TouchedPaths say where a call's arguments name the
	// files it writes (checkpointed before it runs, so a rewind restores
	// them) and reads (recorded in the touched-files ledger after success):
	// argument names ("path") or JSON pointers into the arguments
	// ("/files/0/path", "/files/*/path"), each reaching a string or an array
	// of strings; see parseArgPath. Each is checked against InputSchema when
	// the tool is built. A read-only tool may not declare MutatedPaths.
	MutatedPaths, TouchedPaths []string
	// Escalation lets a call carry "escalate": true, which is never allowed
	// silently: an automatic allow becomes an ask (docs/spec.md §6). The
	// program sees it on stdin. InputSchema must take a boolean "escalate".
	// A read-only tool may not declare it.
	Escalation bool
}

// Command builds the tool a CommandSpec describes. A call's arguments are
// validated against InputSchema (Validate refuses unknown fields, wrong
// types and missing required fields), then written as one line of compact
// JSON to the program's stdin; the program runs in the workspace, in the
// sandbox unless spec.Unsandboxed, with the
// environment described in the package comment plus spec.Env, and its
// stdout, whole, is the result text. A non-zero exit is an error naming the
// exit code, with the tail of stderr (or of stdout when stderr is empty); a
// timeout is an error wrapping ErrTimeout.
//
// Command returns a *tool.RegistrationError (matching tool.ErrInvalidTool)
// for a spec the registry would refuse (name, description, guidelines,
// declarations, labels, timeout, schema, mutated paths or escalation on a
// read-only tool), and an error wrapping ErrInvalidCommand for an empty
// command, a program not found in PATH, a bad Env, a negative
// SelfConcurrency, a path declaration that does not parse or does not fit
// the schema, or Escalation with a schema that cannot carry "escalate". The
// tool is safe for concurrent use.
func Command(spec CommandSpec) (*tool.Tool, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidCommand, spec.Name, fmt.Sprintf(format, args...))
	}
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, invalid(`"command" is empty; give the program and its fixed arguments, e.g. ["./scripts/deploy", "--dry-run"]`)
	}
	argv := append([]string(nil), spec.Command...)
	// A program found in the node's PATH is shown to the sandbox
	// read-only, wherever it lives; one relative to the workspace is in it.
	var program []string
	if !strings.Contains(argv[0], "/") {
		p, err := exec.LookPath(argv[0])
		if err != nil {
			return nil, invalid("program %q is not in PATH; install it or give its path", argv[0])
		}
		if abs, err := filepath.Abs(p); err == nil {
			program = []string{abs}
		}
	} else if filepath.IsAbs(argv[0]) {
		program = []string{argv[0]}
	}
	box := spec.Box
	if box == nil && !spec.Unsandboxed {
		box = DefaultSandbox()
	}
	env := make(map[string]string, len(spec.Env))
	for k, v := range spec.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return nil, invalid("environment variable name %q is not valid", k)
		case strings.HasPrefix(k, "CALLSHEET_"):
			return nil, invalid("environment variable %s is set by the runtime for each call and cannot be configured", k)
		case strings.IndexByte(v, 0) >= 0:
			return nil, invalid("environment variable %s holds a NUL byte", k)
		}
		env[k] = v
	}
	schema := spec.InputSchema
	if len(strings.TrimSpace(string(schema))) == 0 {
		schema = json.RawMessage(emptyObjectSchema)
	}
	labels := make([]tool.Label, len(spec.Labels))
	for i, l := range spec.Labels {
		labels[i] = tool.Label(l)
	}

	t := &tool.Tool{
		Name:             spec.Name,
		Description:      spec.Description,
		ShortDescription: spec.ShortDescription,
		InputSchema:      append(json.RawMessage(nil), schema...),
		Guidelines:       append([]string(nil), spec.Guidelines...),
		Snippet:          spec.Snippet,
		Declarations: tool.Declarations{
			Effect:      tool.Effect(spec.Effect),
			Replay:      tool.Replay(spec.Replay),
			Concurrency: tool.Concurrency(spec.Concurrency),
		},
		Labels:        labels,
		Timeout:       spec.Timeout,
		Deferred:      spec.Deferred,
		Escalation:    spec.Escalation,
		FleetCap:      spec.FleetCap,
		FleetCapScope: spec.FleetCapScope,
	}
	if err := contract(t, spec); err != nil {
		return nil, invalid("%v", err)
	}
	// Only the operator's own timeout is applied here; without one the
	// runtime's deadline (timeouts.default or a per-tool override) governs,
	// through ctx.
	timeout := spec.Timeout
	if timeout < 0 {
		timeout = 0 // Infinite: only a user-mediated tool may have it; Register checks
	}
	var validate func(json.RawMessage) error
	t.Run = func(ctx context.Context, args json.RawMessage) (tool.Result, error) {
		call, err := callFrom(ctx)
		if err != nil {
			return tool.Result{}, err
		}
		// Run never trusts that Validate ran first.
		if err := validate(args); err != nil {
			return tool.Result{}, err
		}
		input, err := tool.NormalizeArguments(args)
		if err != nil {
			return tool.Result{}, err
		}
		// Standard output is the result: it streams to a spill
		// (tools/spill.go); standard error only feeds an error's quote.
		stderr := capBuffer{limit: maxCommandStderr}
		sp := spillFor(call)
		defer sp.Discard() // unless Output took the file over
		ps := procSpec{
			Args:    argv,
			Dir:     call.Workspace,
			Env:     processEnv(call, env),
			Stdin:   append(input, '\n'),
			Timeout: timeout,
			Stderr:  &stderr,
			Output:  sp,
		}
		// An approved escalated call runs outside the sandbox, as shell's
		// does (docs/spec.md §10).
		if !spec.Unsandboxed && !call.Escalate {
			if err := boxReady(box); err != nil {
				return tool.Result{}, fmt.Errorf("%s: nothing ran: %w. Or the node's operator can run this tool unconfined with \"sandbox\": false in its command_tools entry", spec.Name, err)
			}
			run, release, err := sandboxRun(ctx, call, box)
			if err != nil {
				return tool.Result{}, fmt.Errorf("%s: nothing ran: %w", spec.Name, err)
			}
			defer release()
			run.ReadOnly = program
			ps.Sandbox, ps.Run = box, run
		}
		_, code, err := runProcess(ctx, ps)
		switch {
		case errors.Is(err, sandbox.ErrSetup):
			return tool.Result{}, fmt.Errorf("%s: nothing ran: %w", spec.Name, err)
		case errors.Is(err, ErrTimeout):
			return tool.Result{}, fmt.Errorf("%s: %w %s; the program and everything it started were killed%s", spec.Name, err, timeoutWhen(ctx, timeout), quoteTail(stderr.Bytes(), sp.Tail()))
		case err != nil:
			return tool.Result{}, fmt.Errorf("%s: %w", spec.Name, err)
		case code != 0:
			return tool.Result{}, fmt.Errorf("%s: %s exited with code %d%s", spec.Name, argv[0], code, quoteTail(stderr.Bytes(), sp.Tail()))
		}
		res := tool.Text(strings.ToValidUTF8(string(sp.Head()), "\uFFFD"))
		if sp.Spilled() {
			res.Full = sp.Output("")
		}
		return res, nil
	}
	// Checked against the whole contract by a registry, so a command tool
	// is refused here, at start-up, for the same reasons and in the same
	// words as at registration. Register does not modify t.
	if err := (&tool.Registry{}).Register(t); err != nil {
		return nil, err
	}
	validate, err := tool.CompileSchema(t.InputSchema)
	if err != nil {
		return nil, invalid("input schema: %v", err) // Register compiled it already
	}
	t.Validate = validate
	return t, nil
}

// maxCommandStderr bounds the standard error of a command tool held in
// memory (1 MiB): it is quoted in an error, never a result.
const maxCommandStderr = 1 << 20

// contract sets the parts of the tool contract a spec declares beyond the
// three declarations: self-concurrency, mutated and touched paths (checked
// against the input schema), and escalation (whose schema must take
// "escalate"). The registry then applies the rules every tool obeys.
func contract(t *tool.Tool, spec CommandSpec) error {
	switch n := spec.SelfConcurrency; {
	case n < 0:
		return fmt.Errorf("self_concurrency %d is negative: use 0 or 1 for one call at a time, or 2 or more", n)
	case n >= 2:
		t.SelfConcurrency = func() int { return n }
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
		return nil // the registry refuses the schema, in its own words
	}
	for _, ps := range []struct {
		name  string
		decls []string
		dst   *func(json.RawMessage) []string
	}{{"mutated_paths", spec.MutatedPaths, &t.MutatedPaths}, {"touched_paths", spec.TouchedPaths, &t.TouchedPaths}} {
		if len(ps.decls) == 0 {
			continue
		}
		for i, d := range ps.decls {
			if err := checkArgPath(&schema, d); err != nil {
				return fmt.Errorf("%s[%d] %w", ps.name, i, err)
			}
		}
		f, err := argPaths(ps.decls)
		if err != nil {
			return fmt.Errorf("%s%w", ps.name, err)
		}
		*ps.dst = f
	}
	if spec.Escalation {
		return checkEscalate(&schema)
	}
	return nil
}

// timeoutWhen says which limit a timed-out run hit: the call's own deadline
// (set by the runtime) when ctx has expired, else the tool's timeout d.
func timeoutWhen(ctx context.Context, d time.Duration) string {
	if ctx.Err() != nil || d <= 0 {
		return "at the call's deadline"
	}
	return "after " + d.String()
}

// quoteTail returns the tail of stderr, or of stdout when stderr is empty,
// as a suffix for an error message; "" when both are empty.
func quoteTail(stderr, stdout []byte) string {
	switch {
	case len(strings.TrimSpace(string(stderr))) > 0:
		return "; stderr:\n" + tail(stderr, tailBytes)
	case len(strings.TrimSpace(string(stdout))) > 0:
		return "; output:\n" + tail(stdout, tailBytes)
	}
	return ""
}
