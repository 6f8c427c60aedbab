package config

import (
	"encoding/json"
	"time"

	"github.com/callsheet/callsheet/decl"
)

// Defaults applied by DefaultConfig and by Parse to every field the file
// leaves out.
const (
	// DefaultToolCalls is the default cap on a turn's overlapping tool calls.
	DefaultToolCalls = 8
	// DefaultDelegations is the default cap on overlapping delegations.
	DefaultDelegations = 8
	// DefaultMCPConnections is the default cap on the calls in flight to one
	// MCP server.
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

	// DefaultMaxStreamsPerTenant is the default number of live event
	// streams one tenant may hold on a node.
	DefaultMaxStreamsPerTenant = 64
	// MaxMaxStreamsPerTenant is the largest accepted
	// event_streams.max_per_tenant: each live stream holds a JetStream
	// consumer and two goroutines.
	MaxMaxStreamsPerTenant = 4096

	// DefaultStreamTimeout is how long a streamed turn stays open without a
	// batch before it ends by itself (turns.stream_timeout).
	DefaultStreamTimeout = 5 * time.Minute
	// MinStreamTimeout and MaxStreamTimeout bound turns.stream_timeout.
	MinStreamTimeout = 100 * time.Millisecond
	MaxStreamTimeout = 24 * time.Hour
)

// Defaults and bounds of Limits (docs/spec.md §10, "Limits").
const (
	// DefaultBodyBytes is the largest request body the API reads (8 MiB).
	DefaultBodyBytes = 8 << 20
	// MaxBodyBytes is the largest accepted limits.body_bytes (1 GiB).
	MaxBodyBytes = 1 << 30
	// DefaultCallsPerTurn is the most calls one turn may hold.
	DefaultCallsPerTurn = 1000
	// MaxCallsPerTurn is the largest accepted limits.calls_per_turn.
	MaxCallsPerTurn = 100_000
	// DefaultOutputBytesPerCall is how much of one call's output is kept
	// (64 MiB): on disk while the call runs, then in the object store.
	DefaultOutputBytesPerCall = 64 << 20
	// DefaultOutputBytesPerTenant is how many bytes of full outputs one
	// tenant keeps in the object store (4 GiB).
	DefaultOutputBytesPerTenant = 4 << 30
	// DefaultSessionsPerTenant is the most open sessions of one tenant.
	DefaultSessionsPerTenant = 10_000
	// DefaultCallsInFlightPerTenant is the most calls of one tenant's turns
	// that may be received and not yet completed at once.
	DefaultCallsInFlightPerTenant = 4096
	// DefaultExclusiveWorkers, DefaultParallelSafeWorkers and
	// DefaultBackgroundWorkers are how many calls of each concurrency class
	// a node runs at once, for all tenants together (limits.workers).
	DefaultExclusiveWorkers    = 64
	DefaultParallelSafeWorkers = 256
	DefaultBackgroundWorkers   = 64
	// MaxWorkers is the largest accepted count of limits.workers: each
	// running call holds a goroutine, and most a sandbox or a connection.
	MaxWorkers = 4096
)

// Defaults and bounds of HTTP (docs/spec.md §8, §10).
const (
	// DefaultMaxConnections is how many connections the HTTP API holds open
	// at once, idle ones included; the node never takes more than half its
	// file descriptor limit (RLIMIT_NOFILE) for them.
	DefaultMaxConnections = 1024
	// MaxMaxConnections is the largest accepted http.max_connections.
	MaxMaxConnections = 1 << 20
	// DefaultIdleTimeout is how long a kept-alive connection may wait for
	// its next request before the node closes it.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultBodyTimeout is how long the node waits for a whole request
	// body, from when its handler starts to read it.
	DefaultBodyTimeout = 30 * time.Second
	// MinHTTPTimeout and MaxHTTPTimeout bound http.idle_timeout and
	// http.body_timeout.
	MinHTTPTimeout = time.Second
	MaxHTTPTimeout = time.Hour
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

// Values of shell.sandbox.
const (
	// SandboxLandlock, the default, runs shell commands in the sandbox
	// (the "sandbox" section: namespaces, with Landlock as one of its
	// layers). The name is the one the field had when Landlock was the
	// whole sandbox; SandboxOn says the same.
	SandboxLandlock = "landlock"
	// SandboxOn is SandboxLandlock.
	SandboxOn = "on"
	// SandboxOff runs shell commands unconfined, with the node's rights.
	SandboxOff = "off"
)

// Values of sandbox.network.
const (
	// SandboxNetworkNone, the default, gives each sandbox a network of its
	// own: only its own loopback.
	SandboxNetworkNone = "none"
	// SandboxNetworkHost shares the node's network with sandboxed commands.
	SandboxNetworkHost = "host"
)

// SandboxBoundaries are the names sandbox.accept_weaker takes (the
// boundaries of docs/security.md "Sandbox"; package sandbox holds the same
// list).
var SandboxBoundaries = []string{"network", "pid", "mount", "user", "limits", "landlock", "seccomp"}

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
	// those name. Empty (the default), with no TenantsFile, means the node
	// serves the single tenant DefaultTenant without authentication, on
	// loopback only.
	Tenants map[string]Tenant `json:"tenants"`
	// TenantsFile names a JSON file holding the tenants instead,
	// {"tenants": {...}}, which the node reads at start and again whenever
	// it changes or on SIGHUP, so tokens rotate without a restart
	// (docs/operations.md, "Rotating tokens"). A relative path is relative
	// to the config file's directory. Not with Tenants. Default: none.
	TenantsFile string `json:"tenants_file"`
	// Shell configures the shell tool.
	Shell Shell `json:"shell"`
	// Sandbox configures the sandbox shell and command tools run in
	// (docs/spec.md §10).
	Sandbox Sandbox `json:"sandbox"`
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
	// Limits bound what a request, a call and a tenant may use; see Limits
	// for the defaults.
	Limits Limits `json:"limits"`
	// EventStreams bounds the live event streams of GET
	// /v1/sessions/{s}/events; see EventStreams for the default.
	EventStreams EventStreams `json:"event_streams"`
	// Turns configures streamed turns; see Turns for the default.
	Turns Turns `json:"turns"`
	// HTTP configures the HTTP API's server: the names it answers to, its
	// connections and its timeouts; see HTTP for the defaults.
	HTTP HTTP `json:"http"`
	// MCPServers are the MCP servers whose tools this node offers, by server
	// name (docs/spec.md §7 "MCP", docs/mcp.md): each server's tool T becomes
	// the tool mcp__NAME__T. Default: none.
	MCPServers map[string]MCPServer `json:"mcp_servers"`
	// Metrics configures the node's Prometheus metrics (docs/operations.md,
	// "Metrics"); see Metrics for the default.
	Metrics Metrics `json:"metrics"`
}

// Metrics configures the node's Prometheus metrics.
type Metrics struct {
	// TenantLabels adds a "tenant" label to the families that count one
	// tenant's work (HTTP requests, harness tasks), so an operator can tell
	// tenants apart. Each tenant then multiplies those series, and the
	// scraped metrics name every tenant. Default false: no label names a
	// tenant.
	TenantLabels bool `json:"tenant_labels"`
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

// Limits bound what one request, one call and one tenant may use
// (docs/spec.md §10, "Limits"). Each limit, when hit, is refused with HTTP
// 413 or 429 and a message naming the limit and its key ("limits.body_bytes",
// ...), except the output limits, which cut what is kept and say so in the
// result, and the workers, which bound how many calls run at once and make
// the rest wait their turn. Every count is ≥ 1 (but WorkersPerTenant's,
// where 0 is its default); counts are per node (each node of a fleet counts
// what it has seen).
type Limits struct {
	// BodyBytes is the largest request body the HTTP API reads,
	// 1 KiB..MaxBodyBytes; a larger one is 413. Default DefaultBodyBytes (8 MiB).
	BodyBytes int `json:"body_bytes"`
	// CallsPerTurn is the most calls one turn may hold, 1..MaxCallsPerTurn;
	// a larger turn is 413 and nothing of it is recorded. Default
	// DefaultCallsPerTurn (1000).
	CallsPerTurn int `json:"calls_per_turn"`
	// OutputBytesPerCall is how much of one call's output is kept, at least
	// tool_output.max_bytes: a process's output is streamed to a spill file up
	// to it (the rest is counted and discarded, with a note), and kept in
	// the object store when the result is cut. Default
	// DefaultOutputBytesPerCall (64 MiB).
	OutputBytesPerCall int `json:"output_bytes_per_call"`
	// OutputBytesPerTenant bounds the full outputs one tenant keeps in the
	// object store. Once they reach it, a cut result says its full output
	// was not kept. Default DefaultOutputBytesPerTenant (4 GiB).
	OutputBytesPerTenant int `json:"output_bytes_per_tenant"`
	// SessionsPerTenant is the most open (not closed) sessions of one
	// tenant; opening one more is 429. Default DefaultSessionsPerTenant (10,000).
	SessionsPerTenant int `json:"sessions_per_tenant"`
	// CallsInFlightPerTenant is the most calls of one tenant's turns that
	// may be received and not yet completed, at least CallsPerTurn; a turn
	// that would pass it is 429 and nothing of it is recorded. Default
	// DefaultCallsInFlightPerTenant (4096).
	CallsInFlightPerTenant int `json:"calls_in_flight_per_tenant"`
	// Workers are how many calls of each concurrency class the node runs
	// at once, for all its tenants together, 1..MaxWorkers each; the other
	// requested calls wait for a worker. Default DefaultWorkers (64
	// exclusive, 256 parallel_safe, 64 isolated_background).
	Workers Workers `json:"workers"`
	// WorkersPerTenant is how many of a class's workers one tenant may hold
	// at once (Config.TenantWorkers). A freed worker goes to the tenant
	// served least recently among those with a call waiting and fewer than
	// this running, so one tenant cannot hold every worker and, with k
	// tenants waiting, each starts a call within k freed (docs/spec.md §10). A
	// class's value is at most its Workers, and below it on a node with
	// tenants (when Workers is 2 or more); 0, the default, is half of the
	// class's Workers (at least 1), or all of them on a node without
	// tenants, whose one tenant shares them with nobody. A tenant's own
	// limits may set its share, class by class; they may not set Workers,
	// which are the node's.
	WorkersPerTenant Workers `json:"workers_per_tenant"`
}

// Workers counts workers per concurrency class.
type Workers struct {
	Exclusive          int `json:"exclusive"`
	ParallelSafe       int `json:"parallel_safe"`
	IsolatedBackground int `json:"isolated_background"`
}

// DefaultWorkers returns the node's workers when the config names none.
func DefaultWorkers() Workers {
	return Workers{Exclusive: DefaultExclusiveWorkers, ParallelSafe: DefaultParallelSafeWorkers, IsolatedBackground: DefaultBackgroundWorkers}
}

// Of returns w's count for class c; an undeclared class counts as
// exclusive (decl.Class.OrStrictest).
func (w Workers) Of(c decl.Class) int {
	switch c.OrStrictest() {
	case decl.ClassParallelSafe:
		return w.ParallelSafe
	case decl.ClassIsolatedBackground:
		return w.IsolatedBackground
	default:
		return w.Exclusive
	}
}

// TenantWorkers returns how many of class c's workers tenant may hold at
// once, with tenants the tenants in force: its workers_per_tenant for c
// (tenants.<t>.limits, else limits) when set, else half of limits.workers
// (at least 1), or all of them on a node without tenants.
func (c Config) TenantWorkers(tenants map[string]Tenant, tenant string, class decl.Class) int {
	all := c.Limits.Workers.Of(class)
	switch n := c.LimitsFor(tenants, tenant).WorkersPerTenant.Of(class); {
	case n > 0:
		return min(n, all)
	case !c.MultiTenant():
		return all
	default:
		return max(all/2, 1)
	}
}

// HTTP configures the HTTP API's server (docs/spec.md §8, §10).
type HTTP struct {
	// AllowedHosts are the names, beyond loopback names and IP addresses,
	// that a node with tenants answers to in a request's Host: "api.example.com",
	// "api.example.com:7700" (that port only) or "*.example.com" (any
	// subdomain). A request naming another host is refused with 403, so a
	// page whose name an attacker made lead to the node (DNS rebinding)
	// reaches nothing. A node without tenants answers loopback names only and
	// takes no list. Default: none.
	AllowedHosts []string `json:"allowed_hosts"`
	// MaxConnections is how many connections the API holds open at once,
	// idle ones included, 1..MaxMaxConnections; more wait to be accepted.
	// At most half the node's file descriptor limit is used. Default
	// DefaultMaxConnections (1024).
	MaxConnections int `json:"max_connections"`
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long, MinHTTPTimeout..MaxHTTPTimeout. Default
	// DefaultIdleTimeout (60s).
	IdleTimeout Duration `json:"idle_timeout"`
	// BodyTimeout bounds the reading of one request body, from its first
	// read to its end, MinHTTPTimeout..MaxHTTPTimeout; a body still arriving
	// then is refused with 408 and its connection closed. Long polls and
	// event streams are not affected: it bounds the upload, not the answer.
	// Default DefaultBodyTimeout (30s).
	BodyTimeout Duration `json:"body_timeout"`
}

// Turns configures turns whose calls arrive while the model streams
// (docs/spec.md §8, POST /v1/sessions/{s}/turns/{t}/calls).
type Turns struct {
	// StreamTimeout ends a streamed turn left open this long after its
	// last batch, with the calls it has (a harness that died mid-stream),
	// MinStreamTimeout..MaxStreamTimeout. Default DefaultStreamTimeout.
	StreamTimeout Duration `json:"stream_timeout"`
}

// EventStreams bounds the followed event streams (SSE or NDJSON) the HTTP
// API serves. Streams with follow=false end by themselves and are not
// counted.
type EventStreams struct {
	// MaxPerTenant is how many live streams one tenant may hold open on one
	// node at once, 1..=MaxMaxStreamsPerTenant; one more is refused with 429
	// until another ends. Default DefaultMaxStreamsPerTenant (64).
	MaxPerTenant int `json:"max_per_tenant"`
}

// MCPServer is one MCP server the node connects to: a program it starts and
// talks to over stdio (Command), or a streamable HTTP endpoint (URL); exactly
// one of the two.
type MCPServer struct {
	// Command is the program and its arguments, started by the node (and
	// restarted with backoff when it exits). The program sees a minimal
	// environment (PATH, HOME, USER, LOGNAME, SHELL, TERM, TMPDIR, LANG)
	// plus Env, never the node's own.
	Command []string `json:"command"`
	// Env adds variables to the program's environment. Default: none.
	Env map[string]string `json:"env"`
	// Cwd is the program's working directory. Default: the node's.
	Cwd string `json:"cwd"`
	// URL is the http(s) URL of a streamable HTTP MCP endpoint, such as
	// "http://127.0.0.1:3001/mcp".
	URL string `json:"url"`
	// Headers are sent with every HTTP request to URL (an Authorization
	// header, for instance). Default: none.
	Headers map[string]string `json:"headers"`
	// TrustAnnotations lets the server's tool annotations declare: a
	// readOnlyHint makes a tool read_only, safe and parallel_safe, an
	// idempotentHint makes it safe to replay. Default false: annotations are
	// labels for approvers, and every tool is side_effecting, never and
	// exclusive unless Tools says otherwise.
	TrustAnnotations bool `json:"trust_annotations"`
	// Tools override the declarations of the server's tools, by the name
	// the server gives them (not the mcp__ name). What an override leaves
	// empty comes from the annotations when trusted, else the strictest
	// value. Default: none.
	Tools map[string]MCPTool `json:"tools"`
}

// MCPTool overrides the declarations of one MCP server tool.
type MCPTool struct {
	// Effect is read_only, user_mediated, delegating or side_effecting.
	Effect string `json:"effect"`
	// Replay is never or safe.
	Replay string `json:"replay"`
	// Concurrency is exclusive, parallel_safe or isolated_background.
	Concurrency string `json:"concurrency"`
	// Labels are effect labels (irreversible, financial, external,
	// affects_others); when set they replace the labels taken from the
	// server's annotations.
	Labels []string `json:"labels"`
	// Timeout is the hard per-call timeout, ≥ 0; 0 means timeouts.default.
	Timeout Duration `json:"timeout"`
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
	// MCPConnections caps the calls in flight to each MCP server (the rest
	// wait their turn, within their timeout). Default DefaultMCPConnections (8).
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
	// Sandbox, when false, runs the program outside the sandbox, with the
	// node's rights. Nil (the default) means true: in the sandbox.
	Sandbox *bool `json:"sandbox"`
	// SelfConcurrency, 0..=MaxConcurrency, lets that many calls of this
	// exclusive tool overlap each other (FIFO beyond it) while staying
	// exclusive with every other tool. 0 (the default) and 1 mean one at a
	// time.
	SelfConcurrency int `json:"self_concurrency"`
	// Deferred keeps the tool out of the model's tool list; tool_search finds
	// it. Default false.
	Deferred bool `json:"deferred"`
	// MutatedPaths say where a call's arguments name the files it writes,
	// whose pre-images are checkpointed before it runs (so a rewind restores
	// them): argument names ("path") or JSON pointers into the arguments
	// ("/files/0/path", "*" for every item of an array: "/files/*/path"),
	// each reaching a string or an array of strings. Not for read_only
	// tools. Default: none.
	MutatedPaths []string `json:"mutated_paths"`
	// TouchedPaths say, in the same form, where the arguments name the files
	// a call reads, recorded in the touched-files ledger after success.
	// Default: none.
	TouchedPaths []string `json:"touched_paths"`
	// Escalation lets a call carry "escalate": true, which always asks for
	// approval; input_schema must then take a boolean "escalate". Not for
	// read_only tools. Default false.
	Escalation bool `json:"escalation"`
}

// Tenant is one tenant a node serves: its bearer tokens, each of which
// authenticates the tenant's API calls as one principal with some scopes
// (docs/spec.md §10), how long its closed sessions are kept, and the limits
// it runs under. At least one token is required, in Token or Tokens.
type Tenant struct {
	// Token is a bearer token whose principal is the tenant's own name and
	// which has every scope (the form from before Tokens): non-empty,
	// without spaces, unique across every tenant's tokens. Optional when
	// Tokens has one.
	Token string `json:"token"`
	// Tokens are bearer tokens that each name a principal. Default: none.
	Tokens []TenantToken `json:"tokens"`
	// Retention, when set, deletes each of the tenant's closed sessions
	// once it has been closed for this long, with a receipt in the
	// tenant's deletions log (docs/spec.md §7); at least MinRetention.
	// Zero (the default) keeps sessions until they are deleted by request.
	Retention Duration `json:"retention"`
	// Limits override the node's limits for this tenant, field by field: a
	// field left out (or 0) keeps the node's value (Config.LimitsFor).
	// Default: none overridden.
	Limits Limits `json:"limits"`
}

// TenantToken is one bearer token of a tenant, the principal it
// authenticates (the name recorded as the decider of the approvals and the
// author of the answers made with it) and what it may do.
type TenantToken struct {
	// Token is the bearer token in the clear: non-empty, without spaces,
	// unique across every tenant's tokens. Exactly one of Token and
	// TokenSHA256 is given.
	Token string `json:"token"`
	// TokenSHA256 is the SHA-256 of the bearer token, 64 hex digits
	// (`printf %s "$TOKEN" | sha256sum`), so that the file need not hold
	// the token itself.
	TokenSHA256 string `json:"token_sha256"`
	// Principal names who holds the token: 1 to 128 letters, digits, '.',
	// '_', '@', '+' or '-' (an e-mail address fits), not ReservedPrincipal.
	// Default: the tenant's name.
	Principal string `json:"principal"`
	// Scopes are what the token may do, any of Scopes(); a request outside
	// them is refused with 403 naming the scope it needs. Nil (the default)
	// means every scope; an empty list is refused.
	Scopes []string `json:"scopes"`
}

// Scopes of a token (docs/spec.md §10): each API route needs one.
const (
	// ScopeRun: open and close sessions, post, stream and cancel turns,
	// and MCP (/mcp).
	ScopeRun = "run"
	// ScopeApprove: decide approvals and answer questions.
	ScopeApprove = "approve"
	// ScopeRead: turns, transcripts, events, timelines, outputs, the
	// session list, approvals pending, tools, nodes and the
	// deletions log: everything an auditor reads, export and verify
	// included.
	ScopeRead = "read"
	// ScopeWorkers: poll for tasks, heartbeat, complete and fail them.
	ScopeWorkers = "workers"
	// ScopeTools: register and delete harness tools.
	ScopeTools = "tools"
	// ScopeAdmin: sign a session's head, rewind a workspace, delete a
	// session.
	ScopeAdmin = "admin"
)

// Scopes lists every scope, in the order above.
func Scopes() []string {
	return []string{ScopeRun, ScopeApprove, ScopeRead, ScopeWorkers, ScopeTools, ScopeAdmin}
}

// MinRetention is the shortest tenants.<t>.retention accepted.
const MinRetention = time.Second

// ReservedPrincipal is the decider the log records for an approval nobody
// decided in time (the actors package records it); no token may name it, so
// the log never confuses a person with the timeout.
const ReservedPrincipal = "approval-timeout"

// Principals lists t's tokens with the principal each authenticates, Token
// first: a principal left empty is the tenant's name, and Token has every
// scope (nil Scopes).
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

// MultiTenant reports whether the node authenticates tenants (Tenants or
// TenantsFile given) rather than serving DefaultTenant on loopback to
// anyone.
func (c Config) MultiTenant() bool { return len(c.Tenants) > 0 || c.TenantsFile != "" }

// LimitsFor returns the limits tenant runs under, with tenants the tenants
// in force: the node's Limits with every field the tenant's own limits set
// (non-zero) in its place.
func (c Config) LimitsFor(tenants map[string]Tenant, tenant string) Limits {
	return c.Limits.With(tenants[tenant].Limits)
}

// With returns l with every non-zero field of o in its place (for
// WorkersPerTenant, every non-zero class; Workers are the node's and stay
// l's).
func (l Limits) With(o Limits) Limits {
	for _, f := range []struct{ dst, src *int }{
		{&l.BodyBytes, &o.BodyBytes}, {&l.CallsPerTurn, &o.CallsPerTurn}, {&l.OutputBytesPerCall, &o.OutputBytesPerCall},
		{&l.OutputBytesPerTenant, &o.OutputBytesPerTenant}, {&l.SessionsPerTenant, &o.SessionsPerTenant},
		{&l.CallsInFlightPerTenant, &o.CallsInFlightPerTenant},
		{&l.WorkersPerTenant.Exclusive, &o.WorkersPerTenant.Exclusive},
		{&l.WorkersPerTenant.ParallelSafe, &o.WorkersPerTenant.ParallelSafe},
		{&l.WorkersPerTenant.IsolatedBackground, &o.WorkersPerTenant.IsolatedBackground},
	} {
		if *f.src != 0 {
			*f.dst = *f.src
		}
	}
	return l
}

// Shell configures the shell tool.
type Shell struct {
	// Sandbox is SandboxLandlock (the default; SandboxOn says the same) or
	// SandboxOff.
	Sandbox string `json:"sandbox"`
	// Network, when true, gives sandboxed shell commands the node's
	// network: the older spelling of sandbox.network "host", for shell
	// only. Default false.
	Network bool `json:"network"`
}

// Sandbox configures the sandbox of shell and command tools.
type Sandbox struct {
	// Network is SandboxNetworkNone (the default, also meant by "") or
	// SandboxNetworkHost.
	Network string `json:"network"`
	// UID and GID, when either is set (1..2147483646), are what every
	// tenant's sandboxed commands run as when the node runs as root: the
	// older single-uid form, which gives all tenants one uid (the other
	// defaults to 65533). Zero for both (the default) gives each tenant a
	// uid and gid of its own from UIDs.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// UIDs is the range tenants' uids (and gids, the same numbers) are
	// drawn from on a root node: a tenant's is first + FNV-1a(name) mod
	// count (docs/spec.md §10). Default: first 1879048192, count 65536.
	UIDs SandboxIDs `json:"uids"`
	// Cgroups is "auto" (the default, also meant by ""): each sandbox in a
	// cgroup of its own under its tenant's, wherever the node can make
	// cgroups, and the node in one of its own; or "off": rlimits and a
	// counted budget only.
	Cgroups string `json:"cgroups"`
	// ReadOnly are more host paths (absolute) sandboxed commands see,
	// read-only. Default: none (the system directories only).
	ReadOnly []string `json:"read_only"`
	// Limits cap each sandboxed command.
	Limits SandboxLimits `json:"limits"`
	// AcceptWeaker names boundaries of SandboxBoundaries that sandboxed
	// commands may run without when the kernel cannot give them. Default:
	// none (a missing boundary refuses every sandboxed command).
	AcceptWeaker []string `json:"accept_weaker"`
}

// SandboxIDs is a range of ids: First, First+1, ..., First+Count-1.
type SandboxIDs struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// Values of sandbox.cgroups.
const (
	SandboxCgroupsAuto = "auto"
	SandboxCgroupsOff  = "off"
)

// SandboxLimits cap what one sandboxed command, one tenant's sandboxes and
// all the node's sandboxes use; each is ≥ 0, and 0 (the default) takes the
// sandbox's default (docs/operations.md, "The sandbox's report and
// config").
type SandboxLimits struct {
	// Processes caps processes and threads per sandbox. Default 1024.
	Processes int `json:"processes"`
	// FileSizeMB caps the size of a file a command writes, in MiB.
	// Default 1024.
	FileSizeMB int64 `json:"file_size_mb"`
	// MemoryMB caps a process's private writable memory, in MiB. Default
	// 8192.
	MemoryMB int64 `json:"memory_mb"`
	// CPUSeconds caps a process's CPU time. Default 600.
	CPUSeconds int `json:"cpu_seconds"`
	// SandboxMemoryMB caps one sandbox's memory as a whole (its cgroup).
	// Default: TenantMemoryMB.
	SandboxMemoryMB int64 `json:"sandbox_memory_mb"`
	// TenantProcesses and TenantMemoryMB cap all of one tenant's
	// sandboxes together. Defaults: half of the node's.
	TenantProcesses int   `json:"tenant_processes"`
	TenantMemoryMB  int64 `json:"tenant_memory_mb"`
	// NodeProcesses and NodeMemoryMB cap all the node's sandboxes
	// together. Defaults: half of what the host gives the node (the
	// lowest of pid_max, threads-max, its cgroups' limits and, when not
	// root, its RLIMIT_NPROC; the machine's memory or its cgroups').
	NodeProcesses int   `json:"node_processes"`
	NodeMemoryMB  int64 `json:"node_memory_mb"`
	// TenantDiskMB, when set (at least 4), gives each tenant a file system
	// of its own of that many MiB for its workspaces, apart from the data
	// dir's (an ext4 image in DATA/disks on a loop device: a root node,
	// loop devices and mkfs.ext4). Default 0: none.
	TenantDiskMB int64 `json:"tenant_disk_mb"`
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
		Timeouts:     Timeouts{Default: Duration(DefaultTimeout)},
		Shell:        Shell{Sandbox: SandboxLandlock},
		Guidance:     Guidance{Placement: PlacementSystem},
		Fleet:        Fleet{LeaseTTL: Duration(DefaultLeaseTTL)},
		EventStreams: EventStreams{MaxPerTenant: DefaultMaxStreamsPerTenant},
		Turns:        Turns{StreamTimeout: Duration(DefaultStreamTimeout)},
		Limits:       DefaultLimits(),
		HTTP:         HTTP{MaxConnections: DefaultMaxConnections, IdleTimeout: Duration(DefaultIdleTimeout), BodyTimeout: Duration(DefaultBodyTimeout)},
	}
}

// DefaultLimits returns the limits a node runs with when the config names
// none: the Default* constants above.
func DefaultLimits() Limits {
	return Limits{
		BodyBytes:              DefaultBodyBytes,
		CallsPerTurn:           DefaultCallsPerTurn,
		OutputBytesPerCall:     DefaultOutputBytesPerCall,
		OutputBytesPerTenant:   DefaultOutputBytesPerTenant,
		SessionsPerTenant:      DefaultSessionsPerTenant,
		CallsInFlightPerTenant: DefaultCallsInFlightPerTenant,
		Workers:                DefaultWorkers(),
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
