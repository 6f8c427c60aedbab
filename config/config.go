package config

import (
	"encoding/json"
	"time"
)

// Defaults applied by DefaultConfig and by Parse to every field the file
// leaves out.
const (
	// DefaultToolCalls is the default cap on a turn's overlapping tool calls.
	DefaultToolCalls = 8
	// DefaultDelegations is the default cap on overlapping delegations.
	DefaultDelegations = 8
	// DefaultMCPConnections is the default cap on MCP connections.
	DefaultMCPConnections = 8
	// DefaultLSPRequests is the default cap on in-flight LSP requests.
	DefaultLSPRequests = 4
	// MaxConcurrency is the upper bound of every concurrency field; the lower
	// bound is 1, which restores serial behaviour at that layer.
	MaxConcurrency = 64

	// DefaultMaxBytes is the default size a tool result is cut to (50 KiB).
	DefaultMaxBytes = 51200
	// DefaultMaxLines is the default number of lines a tool result is cut to.
	DefaultMaxLines = 2000
	// MaxMaxBytes is the largest accepted tool_output.max_bytes (256 KiB): a
	// result travels in events, twice in one message (completed and
	// committed), and a message holds at most 1 MiB.
	MaxMaxBytes = 256 << 10

	// DefaultInitialDelay is the default wait before the second attempt of a
	// replay-safe call.
	DefaultInitialDelay = 200 * time.Millisecond
	// DefaultFactor is the default growth of the wait between attempts.
	DefaultFactor = 2.0
	// DefaultMaxDelay is the default longest wait between attempts.
	DefaultMaxDelay = 10 * time.Second
	// DefaultMaxAttempts is the default number of attempts of a replay-safe
	// call, the first one included.
	DefaultMaxAttempts = 3
	// MaxMaxAttempts is the largest accepted retry.max_attempts.
	MaxMaxAttempts = 20

	// DefaultTimeout is the default hard per-call timeout.
	DefaultTimeout = 120 * time.Second
)

// Durability values: when a log write is acknowledged (docs/spec.md §4).
const (
	// DurabilityFsync, the default, fsyncs every write before acknowledging it,
	// so a claim survives power loss as well as kill -9.
	DurabilityFsync = "fsync"
	// DurabilityInterval uses JetStream's periodic sync: faster, but a power
	// loss may drop the last acknowledged writes.
	DurabilityInterval = "interval"
)

// Permission rule actions.
const (
	ActionAllow = "allow"
	ActionAsk   = "ask"
	ActionDeny  = "deny"
)

// Agent modes. The empty mode is ModeDefault.
const (
	// ModeDefault admits every tool the agent's surface holds.
	ModeDefault = "default"
	// ModePlan admits read-only tools only.
	ModePlan = "plan"
)

// Shell sandboxes.
const (
	// SandboxLandlock, the default, confines shell commands with Landlock.
	SandboxLandlock = "landlock"
	// SandboxOff runs shell commands unconfined.
	SandboxOff = "off"
)

// Guidance placements: where tool guidelines and snippets go in what a model
// is given.
const (
	// PlacementSystem, the default, gathers guidance into the system prompt.
	PlacementSystem = "system"
	// PlacementDescription appends each tool's guidance to its description.
	PlacementDescription = "description"
)

// DefaultTenant is the tenant a node serves when Config.Tenants is empty.
const DefaultTenant = "default"

// Config is a node's configuration: the JSON of docs/spec.md §6. Every field is
// optional in the file; Parse fills what is left out from DefaultConfig. A
// Config is plain data: safe for concurrent reads, not for concurrent writes.
type Config struct {
	// Concurrency caps each layer; see Concurrency for the defaults.
	Concurrency Concurrency `json:"concurrency"`
	// Tools switches tools on or off by name (availability, not
	// authorisation: a tool switched off is blocked as unavailable). A tool
	// not named keeps its default availability. Default: none named.
	Tools map[string]bool `json:"tools"`
	// Permission is the authorisation policy. Default: not strict, no rules.
	Permission Permission `json:"permission"`
	// Agents are named agent profiles a session may open with. Default: none.
	Agents map[string]Agent `json:"agents"`
	// ToolOutput caps what a result carries; see ToolOutput for the defaults.
	ToolOutput ToolOutput `json:"tool_output"`
	// Durability is DurabilityFsync (the default) or DurabilityInterval.
	Durability string `json:"durability"`
	// ParallelToolCalls, when false, runs every call of a turn alone, in model
	// order. Nil (the default) means true. An agent may override it.
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
	// Retry is the backoff of replay-safe calls; see Retry for the defaults.
	Retry Retry `json:"retry"`
	// Timeouts are the per-call timeouts; see Timeouts for the defaults.
	Timeouts Timeouts `json:"timeouts"`
	// CommandTools are operator-defined tools that run a program. Default:
	// none.
	CommandTools []CommandTool `json:"command_tools"`
	// Tenants maps tenant names to their bearer tokens and the principals
	// those name. Empty (the default) means the node serves the single
	// tenant DefaultTenant without authentication, on loopback only.
	Tenants map[string]Tenant `json:"tenants"`
	// Shell configures the shell tool's sandbox.
	Shell Shell `json:"shell"`
	// Web configures webfetch and web_search.
	Web Web `json:"web"`
	// Skills configures where the skill tool looks.
	Skills Skills `json:"skills"`
	// Memory turns on memory_propose. Default: false.
	Memory bool `json:"memory"`
	// Guidance says how tool guidelines and snippets reach the model.
	Guidance Guidance `json:"guidance"`
	// Delegate configures where the task tool sends delegated goals.
	Delegate Delegate `json:"delegate"`
	// Hooks are external commands run around tool calls (docs/permissions.md).
	Hooks Hooks `json:"hooks"`
	// Replicas is the replica count of the event stream, the KV buckets and
	// the object store when a node creates them: 1..5, or 0 (the default)
	// for 3 when the node's NATS cluster has 3 or more servers, else 1. An
	// existing stream keeps a larger count (docs/spec.md §7).
	Replicas int `json:"replicas"`
	// Fleet tunes a fleet's liveness; see Fleet for the defaults.
	Fleet Fleet `json:"fleet"`
}

// DefaultLeaseTTL is how long a node's lease lives without a renewal.
const DefaultLeaseTTL = 5 * time.Second

// Fleet configures how the nodes of a fleet tell each other they are alive
// (docs/spec.md §7).
type Fleet struct {
	// LeaseTTL is how long a node's lease lives without a renewal, 2s..60s:
	// a node renews it three times within it, stops acting once it could
	// not renew for most of it, and is taken over after it. Default
	// DefaultLeaseTTL.
	LeaseTTL Duration `json:"lease_ttl"`
}

// Hooks are external commands run around tool calls. Each gets the call as
// JSON on stdin: {"tenant","session","turn","call","tool","arguments"}; an
// after-tool hook also gets "result" (the result as the API shows it).
type Hooks struct {
	// BeforeTool hooks run before permission is decided; a non-zero exit
	// fails the whole turn (nothing is recorded or run) with the hook's
	// stderr in the error.
	BeforeTool []Hook `json:"before_tool"`
	// Middleware answers on stdout {"action":"allow"}, {"action":"deny",
	// "reason":"..."} (the call is blocked/denied, recoverably) or
	// {"action":"rewrite","arguments":{...}} (validated again). A failing
	// middleware denies the call.
	Middleware []Hook `json:"middleware"`
	// AfterTool hooks see each result; their failures are logged only.
	AfterTool []Hook `json:"after_tool"`
}

// Hook is one external command and the tools it applies to.
type Hook struct {
	// Name identifies the hook in errors, events and metrics.
	Name string `json:"name"`
	// Command is the program and its arguments (never a shell line).
	Command []string `json:"command"`
	// Tools are tool-name globs the hook applies to; empty means all.
	Tools []string `json:"tools"`
	// Timeout bounds one run; default 10s.
	Timeout Duration `json:"timeout"`
}

// Concurrency caps the overlapping work at each layer. Every field takes
// 1..=MaxConcurrency; 1 restores serial behaviour at that layer.
type Concurrency struct {
	// ToolCalls caps a turn's overlapping tool calls. Default DefaultToolCalls (8).
	ToolCalls int `json:"tool_calls"`
	// Delegations caps overlapping delegated tasks. Default DefaultDelegations (8).
	Delegations int `json:"delegations"`
	// MCPConnections caps open MCP connections. Default DefaultMCPConnections (8).
	MCPConnections int `json:"mcp_connections"`
	// LSPRequests caps in-flight LSP requests. Default DefaultLSPRequests (4).
	LSPRequests int `json:"lsp_requests"`
}

// Permission is the authorisation policy (docs/spec.md §6).
type Permission struct {
	// Strict asks for approval by effect: none for read_only, a fresh one for
	// every side_effecting (or unknown) call, re-evaluated for every child call
	// of a delegating one. Default false.
	Strict bool `json:"strict"`
	// Rules decide allow, ask or deny by tool and argument. Default: none.
	Rules []Rule `json:"rules"`
	// ApprovalTimeout is how long an asked approval may stay pending before it
	// counts as denied. Zero (the default) waits without limit; a pending
	// approval survives restarts either way.
	ApprovalTimeout Duration `json:"approval_timeout"`
}

// Rule is one permission rule: calls of Tool whose main argument matches
// Match get Action.
type Rule struct {
	// ID names the rule in approval provenance and metrics. Optional; when
	// set it takes 1 to 64 letters, digits, '_' or '-' and is unique across
	// the whole config.
	ID string `json:"id"`
	// Tool is the tool name, or a glob over tool names with * and ? as
	// wildcards ("*" matches every tool). Required.
	Tool string `json:"tool"`
	// Match is a glob over the tool's main argument (the shell command, the
	// path, the URL), such as "git *". Only * (any run of characters,
	// slashes included) and ? (one character) are wildcards; [, ] and \
	// match themselves. Empty matches every call.
	Match string `json:"match"`
	// Action is ActionAllow, ActionAsk or ActionDeny. Required.
	Action string `json:"action"`
}

// Agent is a named agent profile.
type Agent struct {
	// Mode is ModeDefault or ModePlan; empty means ModeDefault.
	Mode string `json:"mode"`
	// Tools, when not nil, is the exact tool list of the agent: it replaces
	// the default surface, it does not extend it. Nil (the default) keeps the
	// default surface; an empty list gives the agent no tools.
	Tools []string `json:"tools"`
	// Rules are permission rules added to Permission.Rules for this agent's
	// sessions. Default: none.
	Rules []Rule `json:"rules"`
	// ParallelToolCalls overrides Config.ParallelToolCalls for this agent.
	// Nil (the default) inherits it.
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
}

// ToolOutput caps a result; the full output is kept and the cut result says
// where (docs/spec.md §2).
type ToolOutput struct {
	// MaxBytes is the largest result, 1..=MaxMaxBytes. Default DefaultMaxBytes (51200).
	MaxBytes int `json:"max_bytes"`
	// MaxLines is the most lines a result keeps, at least 1. Default DefaultMaxLines (2000).
	MaxLines int `json:"max_lines"`
}

// Retry is the exponential backoff between attempts of a replay-safe call.
// The wait before attempt n+1 is InitialDelay·Factor^(n-1), capped at MaxDelay.
type Retry struct {
	// InitialDelay is the first wait, > 0. Default DefaultInitialDelay (200ms).
	InitialDelay Duration `json:"initial_delay"`
	// Factor is the growth of the wait, ≥ 1. Default DefaultFactor (2).
	Factor float64 `json:"factor"`
	// MaxDelay caps the wait, ≥ InitialDelay. Default DefaultMaxDelay (10s).
	MaxDelay Duration `json:"max_delay"`
	// MaxAttempts counts every attempt, the first included, 1..=MaxMaxAttempts;
	// 1 never retries. Default DefaultMaxAttempts (3).
	MaxAttempts int `json:"max_attempts"`
}

// Timeouts are the hard per-call timeouts.
type Timeouts struct {
	// Default applies to every tool that declares no timeout of its own,
	// > 0. Default DefaultTimeout (120s).
	Default Duration `json:"default"`
	// Tools overrides the timeout of named tools, each > 0. Default: none.
	Tools map[string]Duration `json:"tools"`
}

// CommandTool is an operator-defined tool that runs a program (docs/spec.md §6). The
// validated arguments reach the program as JSON on stdin, stdout is the
// result, a non-zero exit an error. Every declaration left empty takes its
// strictest value (side_effecting, never, exclusive).
type CommandTool struct {
	// Name is the model-visible name: 1 to 64 letters, digits, '_' or '-',
	// unique among command tools. Required.
	Name string `json:"name"`
	// Description is model-visible. Required, non-empty.
	Description string `json:"description"`
	// ShortDescription is the one-line form; empty falls back to Description.
	ShortDescription string `json:"short_description"`
	// Guidelines say when to use the tool; at least one non-empty. Required.
	Guidelines []string `json:"guidelines"`
	// Snippet is an example call. Optional.
	Snippet string `json:"snippet"`
	// InputSchema is the JSON Schema of the arguments: an object whose "type"
	// is "object". Required. Parse stores it compacted.
	InputSchema json.RawMessage `json:"input_schema"`
	// Command is the program and its fixed arguments; arguments never reach
	// it through the command line. Required, with a non-empty program.
	Command []string `json:"command"`
	// Effect is read_only, user_mediated, delegating or side_effecting; empty
	// means side_effecting.
	Effect string `json:"effect"`
	// Replay is never or safe; empty means never.
	Replay string `json:"replay"`
	// Concurrency is exclusive, parallel_safe or isolated_background; empty
	// means exclusive.
	Concurrency string `json:"concurrency"`
	// Labels are effect labels from irreversible, financial, external,
	// affects_others: signals, never gates. Default: none.
	Labels []string `json:"labels"`
	// Timeout is the hard per-call timeout, ≥ 0; zero (the default) means
	// Timeouts.Default.
	Timeout Duration `json:"timeout"`
	// Env is added to the program's environment, after the call id and the
	// idempotency key. Default: none.
	Env map[string]string `json:"env"`
	// FleetCap, 1..10000, bounds the calls of this tool running at once
	// across every session and node (docs/spec.md §7); 0 (the default) means
	// none. FleetCapScope is "tenant" (the default: per tenant) or "fleet".
	FleetCap      int    `json:"fleet_cap"`
	FleetCapScope string `json:"fleet_cap_scope"`
}

// Tenant is one tenant a node serves: its bearer tokens, each of which
// authenticates the tenant's API calls as one principal (docs/permissions.md,
// "Who decided"). At least one token is required, in Token or Tokens.
type Tenant struct {
	// Token is a bearer token whose principal is the tenant's own name (the
	// form from before Tokens): non-empty, without spaces, unique across
	// every tenant's tokens. Optional when Tokens has one.
	Token string `json:"token"`
	// Tokens are bearer tokens that each name a principal. Default: none.
	Tokens []TenantToken `json:"tokens"`
}

// TenantToken is one bearer token of a tenant and the principal it
// authenticates: the name recorded as the decider of the approvals and the
// author of the answers made with it.
type TenantToken struct {
	// Token is the bearer token: non-empty, without spaces, unique across
	// every tenant's tokens. Required.
	Token string `json:"token"`
	// Principal names who holds the token: 1 to 128 letters, digits, '.',
	// '_', '@', '+' or '-' (an e-mail address fits), not ReservedPrincipal.
	// Default: the tenant's name.
	Principal string `json:"principal"`
}

// ReservedPrincipal is the decider the log records for an approval nobody
// decided in time (the actors package records it); no token may name it, so
// the log never confuses a person with the timeout.
const ReservedPrincipal = "approval-timeout"

// Principals lists t's tokens with the principal each authenticates, Token
// first: a principal left empty is the tenant's name.
func (t Tenant) Principals(tenant string) []TenantToken {
	var out []TenantToken
	if t.Token != "" {
		out = append(out, TenantToken{Token: t.Token, Principal: tenant})
	}
	for _, tok := range t.Tokens {
		if tok.Principal == "" {
			tok.Principal = tenant
		}
		out = append(out, tok)
	}
	return out
}

// Shell configures the shell tool.
type Shell struct {
	// Sandbox is SandboxLandlock (the default) or SandboxOff.
	Sandbox string `json:"sandbox"`
	// Network lets sandboxed commands reach the network. Default false.
	Network bool `json:"network"`
}

// Web configures webfetch and web_search.
type Web struct {
	// AllowHosts, when not empty, are the only hosts webfetch may reach: host
	// names such as "example.com", or "*.example.com" for its subdomains.
	// Empty (the default) restricts nothing.
	AllowHosts []string `json:"allow_hosts"`
	// SearchEndpoint is the http(s) URL web_search queries. Empty (the
	// default) leaves web_search without a backend.
	SearchEndpoint string `json:"search_endpoint"`
}

// Skills configures the skill tool.
type Skills struct {
	// Dirs are directories searched for skills, in order. Default: none.
	Dirs []string `json:"dirs"`
}

// Guidance says how tool guidelines and snippets reach the model.
type Guidance struct {
	// Placement is PlacementSystem (the default) or PlacementDescription.
	Placement string `json:"placement"`
	// Guidelines includes tool guidelines. Nil (the default) means true.
	Guidelines *bool `json:"guidelines"`
	// Snippets includes tool snippets. Nil (the default) means true.
	Snippets *bool `json:"snippets"`
	// Budget is the size in bytes of the tool section beyond which short
	// descriptions are used, ≥ 0. Zero (the default) means no budget.
	Budget int `json:"budget"`
}

// Delegate configures the task tool.
type Delegate struct {
	// Endpoint is the http(s) URL of the harness that runs delegated goals
	// (the task tool POSTs {"goal", ...} and reads {"result"}). Empty (the
	// default) leaves task unregistered, so a call is blocked as unavailable.
	Endpoint string `json:"endpoint"`
}

// DefaultConfig returns the configuration a node runs with when no file is
// given: the defaults named by this package's constants, nothing else set.
func DefaultConfig() Config {
	return Config{
		Concurrency: Concurrency{
			ToolCalls:      DefaultToolCalls,
			Delegations:    DefaultDelegations,
			MCPConnections: DefaultMCPConnections,
			LSPRequests:    DefaultLSPRequests,
		},
		ToolOutput: ToolOutput{MaxBytes: DefaultMaxBytes, MaxLines: DefaultMaxLines},
		Durability: DurabilityFsync,
		Retry: Retry{
			InitialDelay: Duration(DefaultInitialDelay),
			Factor:       DefaultFactor,
			MaxDelay:     Duration(DefaultMaxDelay),
			MaxAttempts:  DefaultMaxAttempts,
		},
		Timeouts: Timeouts{Default: Duration(DefaultTimeout)},
		Shell:    Shell{Sandbox: SandboxLandlock},
		Guidance: Guidance{Placement: PlacementSystem},
		Fleet:    Fleet{LeaseTTL: Duration(DefaultLeaseTTL)},
	}
}

// AgentNamed returns the agent profile called name, and whether there is one.
func (c Config) AgentNamed(name string) (Agent, bool) {
	a, ok := c.Agents[name]
	return a, ok
}

// ParallelToolCallsFor reports whether the calls of a session opened with
// the named agent may overlap: the agent's ParallelToolCalls if it sets one,
// else Config.ParallelToolCalls, else true. An unknown or empty agent name
// gets the session-wide value.
func (c Config) ParallelToolCallsFor(agent string) bool {
	if a, ok := c.Agents[agent]; ok && a.ParallelToolCalls != nil {
		return *a.ParallelToolCalls
	}
	if c.ParallelToolCalls != nil {
		return *c.ParallelToolCalls
	}
	return true
}
