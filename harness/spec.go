package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/tool"
)

// ErrInvalidSpec is matched by every error about a registration that
// breaks a rule of this package (the tool contract's own rules come as a
// *tool.RegistrationError).
var ErrInvalidSpec = errors.New("harness: invalid tool registration")

// Bounds of one registration (docs/workers.md, "Registering a tool"): a
// tenant's registration is stored and watched by every node, so its size is
// bounded before anything is kept.
const (
	// MaxSchemaBytes bounds input_schema.
	MaxSchemaBytes = 64 << 10
	// MaxTextBytes bounds description, short_description, snippet and
	// every guideline.
	MaxTextBytes = 16 << 10
	// MaxGuidelines bounds the number of guidelines.
	MaxGuidelines = 32
	// MaxTimeout bounds timeout: a harness tool's call always ends.
	MaxTimeout = 24 * time.Hour
	// MinHeartbeat is the shortest heartbeat_timeout.
	MinHeartbeat = time.Second
	// MaxToolsPerTenant bounds how many harness tools one tenant registers.
	MaxToolsPerTenant = 256
	// ReservedPrefix starts the names of MCP tools (docs/mcp.md); a harness
	// tool may not take one, even before that MCP tool exists.
	ReservedPrefix = "mcp__"
)

// Spec is a harness tool's registration: the body of PUT /v1/tools/{name}
// (docs/spec.md §7). Whatever is left out takes the strictest value: a
// side-effecting, never-replay, exclusive tool with the default timeout and
// no heartbeat.
type Spec struct {
	Description      string           `json:"description"`
	ShortDescription string           `json:"short_description,omitempty"`
	Guidelines       []string         `json:"guidelines"`
	Snippet          string           `json:"snippet,omitempty"`
	InputSchema      json.RawMessage  `json:"input_schema"`
	Effect           tool.Effect      `json:"effect,omitempty"`
	Replay           tool.Replay      `json:"replay,omitempty"`
	Concurrency      tool.Concurrency `json:"concurrency,omitempty"`
	Labels           []tool.Label     `json:"labels,omitempty"`
	// Timeout is the hard per-call timeout (default tool.DefaultTimeout);
	// HeartbeatTimeout, when set, is how long a worker holding a task may go
	// without a heartbeat before it has lost the call.
	Timeout          config.Duration `json:"timeout,omitempty"`
	HeartbeatTimeout config.Duration `json:"heartbeat_timeout,omitempty"`
	// FleetCap and FleetCapScope bound the calls of the tool running at
	// once across the fleet (docs/spec.md §7, "Fleet-wide caps"); a harness
	// tool's scope is its tenant ("tenant", the default), never the fleet.
	FleetCap      int    `json:"fleet_cap,omitempty"`
	FleetCapScope string `json:"fleet_cap_scope,omitempty"`
}

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidName reports whether name can be a harness tool's name: the tool
// contract's rule, and not in the MCP tools' reserved prefix. The error says
// what to do.
func ValidName(name string) error {
	switch {
	case !namePattern.MatchString(name):
		return fmt.Errorf("%w: tool name %q must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' or '-', at most 64), as model providers require", ErrInvalidSpec, name)
	case strings.HasPrefix(name, ReservedPrefix):
		return fmt.Errorf("%w: tool name %q starts with %q, which names MCP servers' tools (docs/mcp.md); choose another name", ErrInvalidSpec, name, ReservedPrefix)
	}
	return nil
}

// Check reports the first rule of this package s breaks, naming the field:
// sizes, a timeout within MaxTimeout, a heartbeat of at least MinHeartbeat
// and below the timeout. The tool contract's rules (declarations, labels,
// the schema compiling, read-only rules) are checked when the tool is
// registered (tool.Registry.CheckFor).
func (s Spec) Check() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, args...))
	}
	switch {
	case len(s.InputSchema) > MaxSchemaBytes:
		return bad("input_schema", "%d bytes, over the limit of %d; describe the arguments more briefly", len(s.InputSchema), MaxSchemaBytes)
	case len(s.Description) > MaxTextBytes:
		return bad("description", "%d bytes, over the limit of %d", len(s.Description), MaxTextBytes)
	case len(s.ShortDescription) > MaxTextBytes:
		return bad("short_description", "%d bytes, over the limit of %d", len(s.ShortDescription), MaxTextBytes)
	case len(s.Snippet) > MaxTextBytes:
		return bad("snippet", "%d bytes, over the limit of %d", len(s.Snippet), MaxTextBytes)
	case len(s.Guidelines) > MaxGuidelines:
		return bad("guidelines", "%d guidelines, over the limit of %d", len(s.Guidelines), MaxGuidelines)
	}
	for i, g := range s.Guidelines {
		if len(g) > MaxTextBytes {
			return bad(fmt.Sprintf("guidelines[%d]", i), "%d bytes, over the limit of %d", len(g), MaxTextBytes)
		}
	}
	if !capsSupported && (s.FleetCap != 0 || s.FleetCapScope != "") {
		return bad("fleet_cap", "this build does not enforce fleet-wide caps; leave fleet_cap out")
	}
	if s.FleetCapScope != "" && s.FleetCapScope != tool.FleetCapTenant {
		// A cap over the whole fleet is keyed by the tool's name alone, so
		// it would share its slots with every other tenant's harness tool
		// of that name: one tenant could hold them and starve another.
		return bad("fleet_cap_scope", "%q: a harness tool's cap counts its own tenant's calls only; use \"tenant\" (the default) or leave it out", s.FleetCapScope)
	}
	timeout := s.EffectiveTimeout()
	switch {
	case s.Timeout < 0:
		return bad("timeout", "%s is negative; leave it out for the default (%s) or give a positive duration such as \"30s\"", s.Timeout, tool.DefaultTimeout)
	case timeout > MaxTimeout:
		return bad("timeout", "%s is over the limit of %s: a harness tool's call must end", s.Timeout, MaxTimeout)
	case s.HeartbeatTimeout < 0:
		return bad("heartbeat_timeout", "%s is negative; leave it out for none, or give a duration of at least %s", s.HeartbeatTimeout, MinHeartbeat)
	case s.HeartbeatTimeout != 0 && s.HeartbeatTimeout.Std() < MinHeartbeat:
		return bad("heartbeat_timeout", "%s is below the minimum of %s", s.HeartbeatTimeout, MinHeartbeat)
	case s.HeartbeatTimeout.Std() > timeout:
		return bad("heartbeat_timeout", "%s is longer than the call's timeout (%s), so it could never be missed; shorten it or leave it out", s.HeartbeatTimeout, timeout)
	}
	return nil
}

// EffectiveTimeout is the call timeout with the default applied.
func (s Spec) EffectiveTimeout() time.Duration {
	if s.Timeout == 0 {
		return tool.DefaultTimeout
	}
	return s.Timeout.Std()
}

// Runner runs one call of a harness tool: it hands the task to a worker and
// waits for its answer (Hub.Run).
type Runner func(ctx context.Context, tenant, name string, heartbeat time.Duration, args json.RawMessage) (tool.Result, error)

// Tool returns the tool.Tool of tenant's registration s under name, whose
// Run hands each call to run. Everything s leaves out is strictest; the
// result is checked when it is registered.
func (s Spec) Tool(tenant, name string, run Runner) *tool.Tool {
	hb := s.HeartbeatTimeout.Std()
	t := &tool.Tool{
		Name: name, Description: s.Description, ShortDescription: s.ShortDescription,
		Guidelines: s.Guidelines, Snippet: s.Snippet, InputSchema: s.InputSchema,
		Declarations: tool.Declarations{Effect: s.Effect, Replay: s.Replay, Concurrency: s.Concurrency},
		Labels:       s.Labels,
		Timeout:      s.EffectiveTimeout(),
		// A harness tool runs in the harness's own process, never in the
		// session's workspace: a node that does not keep the workspace may
		// run it (docs/spec.md §7, "Workspaces").
		WorkspaceFree: true,
		// The claim is recorded as a worker takes the call, naming it
		// (Hub.Run).
		ClaimsWhenTaken: true,
		Run: func(ctx context.Context, args json.RawMessage) (tool.Result, error) {
			return run(ctx, tenant, name, hb, args)
		},
	}
	setFleetCap(t, s)
	return t
}
