package config

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/decl"
)

// problems flattens err into its *Error values, failing if any part is not
// one.
func problems(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range j.Unwrap() {
			out = append(out, problems(t, e)...)
		}
		return out
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *config.Error", err, err)
	}
	return []*Error{e}
}

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestParseEmptyObjectGivesDefaults(t *testing.T) {
	for _, in := range []string{`{}`, " \n{ }\n", `{"concurrency": null, "retry": {"factor": null}, "durability": null}`} {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q) error = %v", in, err)
		}
		if want := DefaultConfig(); !reflect.DeepEqual(got, want) {
			t.Fatalf("Parse(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestParseFillsOnlyAbsentFields(t *testing.T) {
	c, err := Parse([]byte(`{
		"concurrency": {"tool_calls": 1},
		"tool_output": {"max_lines": 10},
		"retry": {"max_attempts": 1},
		"timeouts": {"tools": {"shell": "5m"}}
	}`))
	if err != nil {
		t.Fatalf("Parse error = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"concurrency.tool_calls", c.Concurrency.ToolCalls, 1},
		{"concurrency.delegations", c.Concurrency.Delegations, DefaultDelegations},
		{"concurrency.mcp_connections", c.Concurrency.MCPConnections, DefaultMCPConnections},
		{"concurrency.lsp_requests", c.Concurrency.LSPRequests, DefaultLSPRequests},
		{"tool_output.max_bytes", c.ToolOutput.MaxBytes, DefaultMaxBytes},
		{"tool_output.max_lines", c.ToolOutput.MaxLines, 10},
		{"durability", c.Durability, DurabilityFsync},
		{"retry.initial_delay", c.Retry.InitialDelay.Std(), DefaultInitialDelay},
		{"retry.factor", c.Retry.Factor, DefaultFactor},
		{"retry.max_delay", c.Retry.MaxDelay.Std(), DefaultMaxDelay},
		{"retry.max_attempts", c.Retry.MaxAttempts, 1},
		{"timeouts.default", c.Timeouts.Default.Std(), DefaultTimeout},
		{"timeouts.tools.shell", c.Timeouts.Tools["shell"].Std(), 5 * time.Minute},
		{"shell.sandbox", c.Shell.Sandbox, SandboxLandlock},
		{"guidance.placement", c.Guidance.Placement, PlacementSystem},
		{"parallel_tool_calls", c.ParallelToolCallsFor(""), true},
		{"event_streams.max_per_tenant", c.EventStreams.MaxPerTenant, DefaultMaxStreamsPerTenant},
		{"turns.stream_timeout", c.Turns.StreamTimeout.Std(), DefaultStreamTimeout},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// valid is a command tool that passes validation; cases change one field.
const validTool = `{"name": "t", "description": "d", "guidelines": ["g"], "input_schema": {"type": "object"}, "command": ["p"]}`

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantPath   string // substring of the problem's Path
		wantReason string // substring of its Reason, optional
	}{
		{"tool_calls zero", `{"concurrency": {"tool_calls": 0}}`, "concurrency.tool_calls", "out of range 1..64"},
		{"tool_calls too big", `{"concurrency": {"tool_calls": 65}}`, "concurrency.tool_calls", "65"},
		{"delegations", `{"concurrency": {"delegations": -1}}`, "concurrency.delegations", ""},
		{"mcp_connections", `{"concurrency": {"mcp_connections": 100}}`, "concurrency.mcp_connections", ""},
		{"lsp_requests", `{"concurrency": {"lsp_requests": 0}}`, "concurrency.lsp_requests", ""},
		{"tools bad name", `{"tools": {"web fetch": false}}`, `tools["web fetch"]`, "not a valid tool name"},
		{"rule missing tool", `{"permission": {"rules": [{"action": "allow"}]}}`, "permission.rules[0].tool", "missing"},
		{"rule bad tool", `{"permission": {"rules": [{"tool": "a.b", "action": "allow"}]}}`, "permission.rules[0].tool", ""},
		{"rule bad tool glob", `{"permission": {"rules": [{"tool": "mcp_*.x", "action": "allow"}]}}`, "permission.rules[0].tool", "pattern"},
		{"rule missing action", `{"permission": {"rules": [{"tool": "shell"}]}}`, "permission.rules[0].action", "missing"},
		{"rule bad action", `{"permission": {"rules": [{"tool": "shell", "action": "maybe"}]}}`, "permission.rules[0].action", `"maybe"`},
		{"rule bad id", `{"permission": {"rules": [{"id": "a b", "tool": "shell", "action": "ask"}]}}`, "permission.rules[0].id", ""},
		{"rule duplicate id", `{"permission": {"rules": [{"id": "r", "tool": "shell", "action": "ask"}]}, "agents": {"a": {"rules": [{"id": "r", "tool": "read", "action": "allow"}]}}}`, "agents.a.rules[0].id", "permission.rules[0]"},
		{"approval timeout negative", `{"permission": {"approval_timeout": "-1s"}}`, "permission.approval_timeout", "negative"},
		{"agent bad name", `{"agents": {"a/b": {}}}`, `agents["a/b"]`, "agent name"},
		{"agent bad mode", `{"agents": {"a": {"mode": "build"}}}`, "agents.a.mode", `"build"`},
		{"agent bad tool", `{"agents": {"a": {"tools": ["read", ""]}}}`, "agents.a.tools[1]", ""},
		{"agent duplicate tool", `{"agents": {"a": {"tools": ["read", "read"]}}}`, "agents.a.tools[1]", "twice"},
		{"agent rule", `{"agents": {"a": {"rules": [{"tool": "read", "action": "yes"}]}}}`, "agents.a.rules[0].action", ""},
		{"max_bytes zero", `{"tool_output": {"max_bytes": 0}}`, "tool_output.max_bytes", ""},
		{"max_bytes too big", `{"tool_output": {"max_bytes": 8388609}}`, "tool_output.max_bytes", ""},
		{"max_lines zero", `{"tool_output": {"max_lines": 0}}`, "tool_output.max_lines", ""},
		{"durability", `{"durability": "sometimes"}`, "durability", "fsync, interval"},
		{"durability empty", `{"durability": ""}`, "durability", ""},
		{"replicas too many", `{"replicas": 7}`, "replicas", "0..5"},
		{"lease ttl short", `{"fleet": {"lease_ttl": "500ms"}}`, "fleet.lease_ttl", "2s..60s"},
		{"stream timeout short", `{"turns": {"stream_timeout": "10ms"}}`, "turns.stream_timeout", "100ms..24h"},
		{"fleet cap negative", `{"command_tools": [{"name": "t", "description": "d", "guidelines": ["g"], "input_schema": {"type": "object"}, "command": ["x"], "fleet_cap": -1}]}`, "command_tools[0].fleet_cap", "0..10000"},
		{"fleet cap scope", `{"command_tools": [{"name": "t", "description": "d", "guidelines": ["g"], "input_schema": {"type": "object"}, "command": ["x"], "fleet_cap": 2, "fleet_cap_scope": "world"}]}`, "command_tools[0].fleet_cap_scope", "tenant"},
		{"fleet cap scope alone", `{"command_tools": [{"name": "t", "description": "d", "guidelines": ["g"], "input_schema": {"type": "object"}, "command": ["x"], "fleet_cap_scope": "fleet"}]}`, "command_tools[0].fleet_cap_scope", "without a fleet_cap"},
		{"initial_delay zero", `{"retry": {"initial_delay": 0}}`, "retry.initial_delay", ""},
		{"factor below one", `{"retry": {"factor": 0.5}}`, "retry.factor", ""},
		{"max_delay below initial", `{"retry": {"initial_delay": "1s", "max_delay": "500ms"}}`, "retry.max_delay", ""},
		{"max_attempts zero", `{"retry": {"max_attempts": 0}}`, "retry.max_attempts", ""},
		{"max_attempts too big", `{"retry": {"max_attempts": 21}}`, "retry.max_attempts", ""},
		{"default timeout zero", `{"timeouts": {"default": "0s"}}`, "timeouts.default", ""},
		{"tool timeout zero", `{"timeouts": {"tools": {"shell": 0}}}`, "timeouts.tools.shell", "not positive"},
		{"tool timeout bad name", `{"timeouts": {"tools": {"": "1s"}}}`, "timeouts.tools", ""},
		{"command name", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "a b"`, 1) + `]}`, "command_tools[0].name", ""},
		{"command name missing", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": ""`, 1) + `]}`, "command_tools[0].name", ""},
		{"command name too long", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "`+strings.Repeat("x", 65)+`"`, 1) + `]}`, "command_tools[0].name", ""},
		{"command duplicate", `{"command_tools": [` + validTool + `,` + validTool + `,` + validTool + `]}`, "command_tools[2].name", "command_tools[0]"},
		{"command description", `{"command_tools": [` + strings.Replace(validTool, `"description": "d"`, `"description": " "`, 1) + `]}`, "command_tools[0].description", ""},
		{"command no guideline", `{"command_tools": [` + strings.Replace(validTool, `["g"]`, `["", " "]`, 1) + `]}`, "command_tools[0].guidelines", ""},
		{"command guidelines absent", `{"command_tools": [` + strings.Replace(validTool, `"guidelines": ["g"], `, ``, 1) + `]}`, "command_tools[0].guidelines", ""},
		{"command schema missing", `{"command_tools": [` + strings.Replace(validTool, `"input_schema": {"type": "object"}, `, ``, 1) + `]}`, "command_tools[0].input_schema", "missing"},
		{"command schema not object", `{"command_tools": [` + strings.Replace(validTool, `{"type": "object"}`, `[1]`, 1) + `]}`, "command_tools[0].input_schema", "not a JSON object"},
		{"command schema null", `{"command_tools": [` + strings.Replace(validTool, `{"type": "object"}`, `null`, 1) + `]}`, "command_tools[0].input_schema", ""},
		{"command schema no type", `{"command_tools": [` + strings.Replace(validTool, `{"type": "object"}`, `{}`, 1) + `]}`, "command_tools[0].input_schema.type", "missing"},
		{"command schema wrong type", `{"command_tools": [` + strings.Replace(validTool, `{"type": "object"}`, `{"type": "string"}`, 1) + `]}`, "command_tools[0].input_schema.type", `"string"`},
		{"command missing", `{"command_tools": [` + strings.Replace(validTool, `, "command": ["p"]`, ``, 1) + `]}`, "command_tools[0].command", "missing"},
		{"command empty program", `{"command_tools": [` + strings.Replace(validTool, `["p"]`, `["", "x"]`, 1) + `]}`, "command_tools[0].command[0]", "program"},
		{"command effect", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "effect": "readonly"`, 1) + `]}`, "command_tools[0].effect", "read_only"},
		{"command replay", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "replay": "always"`, 1) + `]}`, "command_tools[0].replay", ""},
		{"command concurrency", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "concurrency": "parallel"`, 1) + `]}`, "command_tools[0].concurrency", ""},
		{"command label", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "labels": ["external", "risky"]`, 1) + `]}`, "command_tools[0].labels[1]", `"risky"`},
		{"command timeout", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "timeout": "-5s"`, 1) + `]}`, "command_tools[0].timeout", ""},
		{"command env", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "env": {"A=B": "x"}`, 1) + `]}`, `command_tools[0].env["A=B"]`, ""},
		{"command self_concurrency negative", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "self_concurrency": -1`, 1) + `]}`, "command_tools[0].self_concurrency", "out of range 0..64"},
		{"command self_concurrency too big", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "self_concurrency": 65`, 1) + `]}`, "command_tools[0].self_concurrency", "65"},
		{"command self_concurrency parallel", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "self_concurrency": 4, "concurrency": "parallel_safe"`, 1) + `]}`, "command_tools[0].self_concurrency", "exclusive tools only"},
		{"command mutated path empty", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "mutated_paths": ["path", ""]`, 1) + `]}`, "command_tools[0].mutated_paths[1]", "empty"},
		{"command mutated path slash", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "mutated_paths": ["files/0"]`, 1) + `]}`, "command_tools[0].mutated_paths[0]", `write "/files/0"`},
		{"command touched path escape", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "touched_paths": ["/a~b"]`, 1) + `]}`, "command_tools[0].touched_paths[0]", "'~' not followed by 0 or 1"},
		{"command read_only mutated", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "effect": "read_only", "mutated_paths": ["path"]`, 1) + `]}`, "command_tools[0].mutated_paths", "read_only tool may not declare mutated paths"},
		{"command read_only escalation", `{"command_tools": [` + strings.Replace(validTool, `"name": "t"`, `"name": "t", "effect": "read_only", "escalation": true`, 1) + `]}`, "command_tools[0].escalation", "read_only tool may not allow escalation"},
		{"tenant bad name", `{"tenants": {"a b": {"token": "x"}}}`, `tenants["a b"]`, "tenant name"},
		{"tenant missing token", `{"tenants": {"a": {}}}`, "tenants.a.token", "missing"},
		{"tenant token space", `{"tenants": {"a": {"token": "x y"}}}`, "tenants.a.token", ""},
		{"tenant duplicate token", `{"tenants": {"a": {"token": "x"}, "b": {"token": "x"}}}`, "tenants.b.token", `tenant "a"`},
		{"tenant missing token, empty tokens", `{"tenants": {"a": {"tokens": []}}}`, "tenants.a.token", "missing"},
		{"tokens entry missing token", `{"tenants": {"a": {"tokens": [{"principal": "alice"}]}}}`, "tenants.a.tokens[0].token", "missing"},
		{"tokens duplicate across tenants", `{"tenants": {"a": {"token": "x"}, "b": {"tokens": [{"token": "x", "principal": "bob"}]}}}`, "tenants.b.tokens[0].token", `tenant "a"`},
		{"tokens duplicate within a tenant", `{"tenants": {"a": {"token": "x", "tokens": [{"token": "x", "principal": "bob"}]}}}`, "tenants.a.tokens[0].token", "another of tenant"},
		{"principal with a space", `{"tenants": {"a": {"tokens": [{"token": "x", "principal": "alice smith"}]}}}`, "tenants.a.tokens[0].principal", "not a valid principal"},
		{"principal too long", `{"tenants": {"a": {"tokens": [{"token": "x", "principal": "` + strings.Repeat("p", 129) + `"}]}}}`, "tenants.a.tokens[0].principal", "not a valid principal"},
		{"principal reserved", `{"tenants": {"a": {"tokens": [{"token": "x", "principal": "approval-timeout"}]}}}`, "tenants.a.tokens[0].principal", "reserved"},
		{"tenant named like the timeout, old form", `{"tenants": {"approval-timeout": {"token": "x"}}}`, "tenants.approval-timeout.token", "approval timeout"},
		{"tenant named like the timeout, default principal", `{"tenants": {"approval-timeout": {"tokens": [{"token": "x"}]}}}`, "tenants.approval-timeout.tokens[0].principal", "approval timeout"},
		{"token and its digest", `{"tenants": {"a": {"tokens": [{"token": "x", "token_sha256": "` + strings.Repeat("ab", 32) + `"}]}}}`, "tenants.a.tokens[0].token", "give one"},
		{"token digest not hex", `{"tenants": {"a": {"tokens": [{"token_sha256": "` + strings.Repeat("zz", 32) + `"}]}}}`, "tenants.a.tokens[0].token_sha256", "64 hex digits"},
		{"token digest too short", `{"tenants": {"a": {"tokens": [{"token_sha256": "abcd"}]}}}`, "tenants.a.tokens[0].token_sha256", "64 hex digits"},
		{"token digest of another tenant's token", `{"tenants": {"a": {"token": "x"}, "b": {"tokens": [{"token_sha256": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}]}}}`, "tenants.b.tokens[0].token_sha256", `tenant "a"`},
		{"scope unknown", `{"tenants": {"a": {"tokens": [{"token": "x", "scopes": ["read", "write"]}]}}}`, "tenants.a.tokens[0].scopes[1]", `"write" is not a scope`},
		{"scope twice", `{"tenants": {"a": {"tokens": [{"token": "x", "scopes": ["read", "read"]}]}}}`, "tenants.a.tokens[0].scopes[1]", "twice"},
		{"scopes empty", `{"tenants": {"a": {"tokens": [{"token": "x", "scopes": []}]}}}`, "tenants.a.tokens[0].scopes", "could do nothing"},
		{"retention too short", `{"tenants": {"a": {"token": "x", "retention": "10ms"}}}`, "tenants.a.retention", "minimum of 1s"},
		{"retention negative", `{"tenants": {"a": {"token": "x", "retention": "-1h"}}}`, "tenants.a.retention", "minimum"},
		{"tenant limit below minimum", `{"tenants": {"a": {"token": "x", "limits": {"body_bytes": 10}}}}`, "tenants.a.limits.body_bytes", "below the minimum of 1024"},
		{"tenant limit negative", `{"tenants": {"a": {"token": "x", "limits": {"sessions_per_tenant": -1}}}}`, "tenants.a.limits.sessions_per_tenant", "below the minimum"},
		{"tenant turn over the node's calls in flight", `{"tenants": {"a": {"token": "x", "limits": {"calls_per_turn": 5000}}}}`, "tenants.a.limits.calls_in_flight_per_tenant", "tenants.a.limits.calls_per_turn (5000)"},
		{"tenants and tenants_file", `{"tenants": {"a": {"token": "x"}}, "tenants_file": "t.json"}`, "tenants_file", "one place"},
		{"tenants_file blank", `{"tenants_file": " "}`, "tenants_file", "empty"},
		{"sandbox", `{"shell": {"sandbox": "docker"}}`, "shell.sandbox", "landlock, off"},
		{"sandbox network", `{"sandbox": {"network": "bridge"}}`, "sandbox.network", `"bridge"`},
		{"shell network contradicts sandbox network", `{"shell": {"network": true}, "sandbox": {"network": "none"}}`, "shell.network", "older spelling"},
		{"sandbox uid", `{"sandbox": {"uid": -1}}`, "sandbox.uid", "out of range"},
		{"sandbox read_only relative", `{"sandbox": {"read_only": ["opt/x"]}}`, "sandbox.read_only[0]", "absolute"},
		{"sandbox limit negative", `{"sandbox": {"limits": {"memory_mb": -1}}}`, "sandbox.limits.memory_mb", "negative"},
		{"sandbox accept_weaker", `{"sandbox": {"accept_weaker": ["pid", "everything"]}}`, "sandbox.accept_weaker[1]", `"everything"`},
		{"allow host url", `{"web": {"allow_hosts": ["https://example.com"]}}`, "web.allow_hosts[0]", "host"},
		{"allow host empty", `{"web": {"allow_hosts": ["ok.com", ""]}}`, "web.allow_hosts[1]", ""},
		{"search endpoint", `{"web": {"search_endpoint": "search.example.com"}}`, "web.search_endpoint", "URL"},
		{"skills dir", `{"skills": {"dirs": [""]}}`, "skills.dirs[0]", ""},
		{"placement", `{"guidance": {"placement": "inline"}}`, "guidance.placement", ""},
		{"budget", `{"guidance": {"budget": -1}}`, "guidance.budget", ""},
		{"delegate endpoint", `{"delegate": {"endpoint": "ftp://x"}}`, "delegate.endpoint", ""},
		{"mcp server name with __", `{"mcp_servers": {"a__b": {"command": ["x"]}}}`, `mcp_servers.a__b`, "mcp__NAME__TOOL"},
		{"mcp server name too long", `{"mcp_servers": {"` + strings.Repeat("s", 33) + `": {"command": ["x"]}}}`, `mcp_servers.sss`, "1 to 32"},
		{"mcp server name with dot", `{"mcp_servers": {"a.b": {"command": ["x"]}}}`, `mcp_servers["a.b"]`, "not a valid MCP server name"},
		{"mcp server neither", `{"mcp_servers": {"a": {}}}`, "mcp_servers.a", `neither "command" nor "url"`},
		{"mcp server both", `{"mcp_servers": {"a": {"command": ["x"], "url": "http://h/mcp"}}}`, "mcp_servers.a", "both"},
		{"mcp server empty program", `{"mcp_servers": {"a": {"command": [" "]}}}`, "mcp_servers.a.command[0]", "program"},
		{"mcp server bad url", `{"mcp_servers": {"a": {"url": "localhost:3001/mcp"}}}`, "mcp_servers.a.url", "URL"},
		{"mcp server env for url", `{"mcp_servers": {"a": {"url": "http://h/mcp", "env": {"A": "1"}}}}`, "mcp_servers.a.env", "not an HTTP one"},
		{"mcp server cwd for url", `{"mcp_servers": {"a": {"url": "http://h/mcp", "cwd": "/tmp"}}}`, "mcp_servers.a.cwd", ""},
		{"mcp server bad env", `{"mcp_servers": {"a": {"command": ["x"], "env": {"A=B": "1"}}}}`, `mcp_servers.a.env["A=B"]`, ""},
		{"mcp server headers for command", `{"mcp_servers": {"a": {"command": ["x"], "headers": {"X": "1"}}}}`, "mcp_servers.a.headers", "HTTP server"},
		{"mcp server bad header name", `{"mcp_servers": {"a": {"url": "http://h/mcp", "headers": {"X Y": "1"}}}}`, `mcp_servers.a.headers["X Y"]`, "header name"},
		{"mcp server header injection", `{"mcp_servers": {"a": {"url": "http://h/mcp", "headers": {"X": "1\r\nHost: evil"}}}}`, "mcp_servers.a.headers.X", "line break"},
		{"mcp tool effect", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"read_file": {"effect": "readonly"}}}}}`, "mcp_servers.a.tools.read_file.effect", "read_only"},
		{"mcp tool replay", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"t": {"replay": "always"}}}}}`, "mcp_servers.a.tools.t.replay", ""},
		{"mcp tool concurrency", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"t": {"concurrency": "parallel"}}}}}`, "mcp_servers.a.tools.t.concurrency", ""},
		{"mcp tool label", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"t": {"labels": ["scary"]}}}}}`, "mcp_servers.a.tools.t.labels[0]", ""},
		{"mcp tool timeout", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"t": {"timeout": "-1s"}}}}}`, "mcp_servers.a.tools.t.timeout", "negative"},
		{"mcp tool empty name", `{"mcp_servers": {"a": {"command": ["x"], "tools": {"": {}}}}}`, "mcp_servers.a.tools", "empty tool name"},
		{"body zero", `{"limits": {"body_bytes": 0}}`, "limits.body_bytes", "below the minimum of 1024"},
		{"body too big", `{"limits": {"body_bytes": 2147483648}}`, "limits.body_bytes", "above the maximum"},
		{"calls per turn zero", `{"limits": {"calls_per_turn": 0}}`, "limits.calls_per_turn", "below the minimum of 1"},
		{"calls per turn too big", `{"limits": {"calls_per_turn": 100001}}`, "limits.calls_per_turn", "above the maximum of 100000"},
		{"output per call below max_bytes", `{"tool_output": {"max_bytes": 4096}, "limits": {"output_bytes_per_call": 4095}}`, "limits.output_bytes_per_call", "tool_output.max_bytes"},
		{"output per tenant negative", `{"limits": {"output_bytes_per_tenant": -1}}`, "limits.output_bytes_per_tenant", ""},
		{"sessions zero", `{"limits": {"sessions_per_tenant": 0}}`, "limits.sessions_per_tenant", ""},
		{"in flight zero", `{"limits": {"calls_in_flight_per_tenant": 0}}`, "limits.calls_in_flight_per_tenant", ""},
		{"in flight below a turn", `{"limits": {"calls_per_turn": 50, "calls_in_flight_per_tenant": 10}}`, "limits.calls_in_flight_per_tenant", "calls_per_turn (50)"},
		{"workers zero", `{"limits": {"workers": {"exclusive": 0}}}`, "limits.workers.exclusive", "out of range 1..4096 (the default is 64)"},
		{"workers too many", `{"limits": {"workers": {"parallel_safe": 5000}}}`, "limits.workers.parallel_safe", "out of range"},
		{"workers unknown class", `{"limits": {"workers": {"background": 4}}}`, "limits.workers.background", "unknown field"},
		{"workers per tenant negative", `{"limits": {"workers_per_tenant": {"exclusive": -1}}}`, "limits.workers_per_tenant.exclusive", "negative"},
		{"workers per tenant above the pool", `{"limits": {"workers": {"isolated_background": 4}, "workers_per_tenant": {"isolated_background": 5}}}`, "limits.workers_per_tenant.isolated_background", "more than limits.workers.isolated_background (4)"},
		{"workers per tenant every worker", `{"tenants": {"a": {"token": "t"}}, "limits": {"workers": {"exclusive": 4}, "workers_per_tenant": {"exclusive": 4}}}`, "limits.workers_per_tenant.exclusive", "one tenant could hold them all"},
		{"tenant's own workers", `{"tenants": {"a": {"token": "t", "limits": {"workers": {"exclusive": 8}}}}}`, "tenants.a.limits.workers", "the workers are the node's"},
		{"tenant's share every worker", `{"tenants": {"a": {"token": "t", "limits": {"workers_per_tenant": {"exclusive": 4}}}}, "limits": {"workers": {"exclusive": 4}}}`, "tenants.a.limits.workers_per_tenant.exclusive", "one tenant could hold them all"},
		{"tenant's share above the pool", `{"tenants": {"a": {"token": "t", "limits": {"workers_per_tenant": {"parallel_safe": 300}}}}}`, "tenants.a.limits.workers_per_tenant.parallel_safe", "more than limits.workers.parallel_safe (256)"},
		{"tenant's share negative", `{"tenants": {"a": {"token": "t", "limits": {"workers_per_tenant": {"isolated_background": -2}}}}}`, "tenants.a.limits.workers_per_tenant.isolated_background", "negative"},
		{"limits unknown key", `{"limits": {"bodybytes": 10}}`, "limits.bodybytes", "unknown field"},
		{"limits wrong type", `{"limits": {"body_bytes": "8MiB"}}`, "limits.body_bytes", "want a number"},
		{"streams per tenant zero", `{"event_streams": {"max_per_tenant": 0}}`, "event_streams.max_per_tenant", "out of range 1..4096"},
		{"allowed hosts without tenants", `{"http": {"allowed_hosts": ["api.example.com"]}}`, "http.allowed_hosts", "loopback names only"},
		{"allowed host a URL", `{"tenants": {"a": {"token": "t"}}, "http": {"allowed_hosts": ["ok.example", "https://api.example.com/"]}}`, "http.allowed_hosts[1]", "no scheme"},
		{"allowed host bad label", `{"tenants": {"a": {"token": "t"}}, "http": {"allowed_hosts": ["api_x.example.com"]}}`, "http.allowed_hosts[0]", `label "api_x"`},
		{"allowed host bad port", `{"tenants": {"a": {"token": "t"}}, "http": {"allowed_hosts": ["api.example.com:99999"]}}`, "http.allowed_hosts[0]", "port"},
		{"allowed host empty", `{"tenants": {"a": {"token": "t"}}, "http": {"allowed_hosts": [""]}}`, "http.allowed_hosts[0]", "not a host"},
		{"max connections zero", `{"http": {"max_connections": 0}}`, "http.max_connections", "out of range"},
		{"idle timeout too short", `{"http": {"idle_timeout": "10ms"}}`, "http.idle_timeout", "out of range 1s..1h0m0s"},
		{"body timeout too long", `{"http": {"body_timeout": "2h"}}`, "http.body_timeout", "the default is 30s"},
		{"streams per tenant too many", `{"event_streams": {"max_per_tenant": 5000}}`, "event_streams.max_per_tenant", "5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error = %v, want one wrapping ErrInvalid", err)
			}
			for _, p := range problems(t, err) {
				if strings.Contains(p.Path, tt.wantPath) && strings.Contains(p.Reason, tt.wantReason) {
					if p.Line == 0 {
						t.Errorf("problem %v has no line", p)
					}
					return
				}
			}
			t.Fatalf("Parse error = %v, want a problem at %q saying %q", err, tt.wantPath, tt.wantReason)
		})
	}
}

func TestErrorMessage(t *testing.T) {
	c := DefaultConfig()
	c.Concurrency.ToolCalls = 0
	err := c.Validate()
	const want = "config: concurrency.tool_calls: 0 is out of range 1..64 (set a value from 1 to 64; 1 runs calls one at a time)"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v, want %q", err, want)
	}

	_, err = Parse([]byte("{\n  \"concurrency\": {\"tool_calls\": 0}\n}"))
	const wantParsed = "config: line 2, column 33: concurrency.tool_calls: 0 is out of range"
	if err == nil || !strings.HasPrefix(err.Error(), wantParsed) {
		t.Fatalf("Parse error = %v, want prefix %q", err, wantParsed)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := DefaultConfig()
	c.Concurrency.ToolCalls = 0
	c.Durability = "nope"
	c.Tenants = map[string]Tenant{"b": {}, "a": {}}
	got := problems(t, c.Validate())
	var paths []string
	for _, p := range got {
		paths = append(paths, p.Path)
	}
	want := []string{"concurrency.tool_calls", "durability", "tenants.a.token", "tenants.b.token"}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths = %q, want %q", paths, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantPath   string
		wantReason string
		wantLine   int
		wantColumn int
	}{
		{"empty", "", "", "empty", 0, 0},
		{"blank", " \n ", "", "empty", 0, 0},
		{"not an object", `[1, 2]`, "", "want a JSON object, got an array", 1, 1},
		{"null document", `null`, "", "want a JSON object", 1, 1},
		{"syntax", "{\n  \"durability\": \"fsync\",\n  }", "", "invalid JSON", 3, 3},
		{"truncated", "{\"concurrency\": {", "", "unexpected end", 1, 18},
		{"trailing data", "{}\n{}", "", "after the configuration object", 2, 1},
		{"trailing garbage", "{} x", "", "after the configuration object", 1, 4},
		{"bad literal", "{\"memory\": tru}", "", "invalid character '}'", 1, 15},
		{"unknown top-level field", `{"durabilty": "fsync"}`, "durabilty", "known fields:", 1, 2},
		{"unknown nested field", "{\"concurrency\": {\n \"toolcalls\": 2}}", "concurrency.toolcalls", `unknown field "toolcalls"`, 2, 2},
		{"wrong case", `{"Concurrency": {}}`, "Concurrency", `did you mean "concurrency"`, 1, 2},
		{"unknown in array element", `{"command_tools": [{}, {"nam": "x"}]}`, "command_tools[1].nam", "unknown field", 1, 25},
		{"unknown in map value", `{"agents": {"a": {"model": "x"}}}`, "agents.a.model", "unknown field", 1, 19},
		{"duplicate key", `{"durability": "fsync", "durability": "interval"}`, "durability", "duplicate key", 1, 25},
		{"duplicate map key", `{"tools": {"a": true, "a": false}}`, "tools.a", "duplicate key", 1, 23},
		{"duplicate key in an input schema", "{\"command_tools\": [{\"input_schema\": {\"type\": \"object\",\n \"type\": \"string\"}}]}", "command_tools[0].input_schema.type", "duplicate key", 2, 2},
		{"duplicate key under a hyphenated name", `{"mcp_servers": {"my-fs": {"env": {"A": "1", "A": "2"}}}}`, "mcp_servers.my-fs.env.A", "duplicate key", 1, 46},
		{"string for int", `{"concurrency": {"tool_calls": "8"}}`, "concurrency.tool_calls", `want a number, got the string "8"`, 1, 32},
		{"fraction for int", `{"tool_output": {"max_lines": 1.5}}`, "tool_output.max_lines", "whole number", 1, 31},
		{"huge int", `{"tool_output": {"max_lines": 1e400}}`, "tool_output.max_lines", "", 1, 31},
		{"int for bool", `{"memory": 1}`, "memory", "want true or false", 1, 12},
		{"object for string", `{"durability": {}}`, "durability", "want a string, got an object", 1, 16},
		{"array element type", `{"agents": {"a": {"tools": ["read", 7]}}}`, "agents.a.tools[1]", "want a string", 1, 37},
		{"object for array", `{"skills": {"dirs": {"a": 1}}}`, "skills.dirs", "want an array", 1, 21},
		{"bad duration", `{"timeouts": {"default": "2 minutes"}}`, "timeouts.default", "not a duration", 1, 26},
		{"duration without unit", `{"retry": {"max_delay": "500"}}`, "retry.max_delay", `"500ms"`, 1, 25},
		{"fractional ms", `{"command_tools": [{"timeout": 1.5}]}`, "command_tools[0].timeout", "whole number of milliseconds", 1, 32},
		{"bool duration", `{"permission": {"approval_timeout": true}}`, "permission.approval_timeout", "want a duration", 1, 37},
		{"array duration", `{"permission": {"approval_timeout": [1]}}`, "permission.approval_timeout", "want a duration", 1, 37},
		{"map value duration", `{"timeouts": {"tools": {"shell": "forever"}}}`, "timeouts.tools.shell", "not a duration", 1, 34},
		{"factor string", `{"retry": {"factor": "2"}}`, "retry.factor", "want a number", 1, 22},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error = %v, want one wrapping ErrInvalid", err)
			}
			ps := problems(t, err)
			if len(ps) != 1 {
				t.Fatalf("Parse error = %v, want exactly one problem", err)
			}
			p := ps[0]
			if p.Path != tt.wantPath || !strings.Contains(p.Reason, tt.wantReason) {
				t.Fatalf("problem = path %q reason %q, want path %q reason containing %q", p.Path, p.Reason, tt.wantPath, tt.wantReason)
			}
			if p.Line != tt.wantLine || p.Column != tt.wantColumn {
				t.Fatalf("position = %d:%d, want %d:%d (%v)", p.Line, p.Column, tt.wantLine, tt.wantColumn, err)
			}
		})
	}
}

func TestFullExample(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "full.json"))
	if err != nil {
		t.Fatalf("Load(full.json) error = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"concurrency.tool_calls", c.Concurrency.ToolCalls, 16},
		{"tools.web_search", c.Tools["web_search"], false},
		{"permission.rules", len(c.Permission.Rules), 4},
		{"permission.approval_timeout", c.Permission.ApprovalTimeout.Std(), 15 * time.Minute},
		{"retry.initial_delay (ms form)", c.Retry.InitialDelay.Std(), 250 * time.Millisecond},
		{"timeouts.tools.webfetch (ms form)", c.Timeouts.Tools["webfetch"].Std(), 20 * time.Second},
		{"command_tools[1].effect (strictest when empty)", c.CommandTools[1].Effect, ""},
		{"command_tools[0].input_schema compacted", strings.ContainsAny(string(c.CommandTools[0].InputSchema), "\n"), false},
		{"command_tools[2].self_concurrency", c.CommandTools[2].SelfConcurrency, 2},
		{"command_tools[2].touched_paths (a pointer)", c.CommandTools[2].TouchedPaths[0], "/templates/*/path"},
		{"event_streams.max_per_tenant", c.EventStreams.MaxPerTenant, 16},
		{"turns.stream_timeout", c.Turns.StreamTimeout.Std(), 90 * time.Second},
		{"limits.workers.parallel_safe", c.Limits.Workers.Of(decl.ClassParallelSafe), 128},
		{"tenant's exclusive workers", c.TenantWorkers(c.Tenants, "acme", decl.ClassExclusive), 8},
		{"tenant's parallel_safe workers (0: half)", c.TenantWorkers(c.Tenants, "acme", decl.ClassParallelSafe), 64},
		{"globex's own exclusive workers", c.TenantWorkers(c.Tenants, "globex", decl.ClassExclusive), 4},
		{"parallel for reviewer", c.ParallelToolCallsFor("reviewer"), true},
		{"parallel for plan (session-wide)", c.ParallelToolCallsFor("plan"), false},
		{"parallel for unknown agent", c.ParallelToolCallsFor("nobody"), false},
		{"locked agent has an empty, non-nil list", c.Agents["locked"].Tools != nil && len(c.Agents["locked"].Tools) == 0, true},
		{"plan agent keeps the default surface", c.Agents["plan"].Tools == nil, true},
		{"mcp_servers", len(c.MCPServers), 2},
		{"http.allowed_hosts", len(c.HTTP.AllowedHosts), 3},
		{"http.body_timeout", c.HTTP.BodyTimeout.Std(), time.Minute},
		{"mcp_servers.fs.trust_annotations", c.MCPServers["fs"].TrustAnnotations, true},
		{"mcp_servers.fs.tools.write_file.timeout", c.MCPServers["fs"].Tools["write_file"].Timeout.Std(), 30 * time.Second},
		{"mcp_servers.search.headers", c.MCPServers["search"].Headers["Authorization"], "Bearer s3cret"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// TestFullExampleUsesEveryField keeps testdata/full.json complete: every
// field of Config must appear in it somewhere.
func TestFullExampleUsesEveryField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "full.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	var walk func(v any, t reflect.Type, path string)
	walk = func(v any, t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == rawType || t == durationType:
			return
		case t.Kind() == reflect.Struct:
			m, _ := v.(map[string]any)
			for name, ft := range jsonFields(t) {
				if fv, ok := m[name]; ok {
					used[path+"."+name] = true
					walk(fv, ft, path+"."+name)
				}
			}
		case t.Kind() == reflect.Map:
			m, _ := v.(map[string]any)
			for _, fv := range m {
				walk(fv, t.Elem(), path+".*")
			}
		case t.Kind() == reflect.Slice:
			s, _ := v.([]any)
			for _, ev := range s {
				walk(ev, t.Elem(), path+"[]")
			}
		}
	}
	walk(doc, reflect.TypeFor[Config](), "")

	checkAll(t, reflect.TypeFor[Config](), "", used)
}

func checkAll(t *testing.T, typ reflect.Type, path string, used map[string]bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == rawType || typ == durationType:
	case typ.Kind() == reflect.Struct:
		for name, ft := range jsonFields(typ) {
			if path == "" && name == "tenants_file" {
				continue // the other place of "tenants", never with it
			}
			if path == ".tenants.*.limits" && name == "workers" {
				continue // the node's, refused in a tenant's limits
			}
			if !used[path+"."+name] {
				t.Errorf("testdata/full.json does not use %s", strings.TrimPrefix(path+"."+name, "."))
			}
			checkAll(t, ft, path+"."+name, used)
		}
	case typ.Kind() == reflect.Map:
		checkAll(t, typ.Elem(), path+".*", used)
	case typ.Kind() == reflect.Slice:
		checkAll(t, typ.Elem(), path+"[]", used)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()

	missing := filepath.Join(dir, "missing.json")
	_, err := Load(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load(missing) error = %v, want fs.ErrNotExist naming %s", err, missing)
	}
	if errors.Is(err, ErrInvalid) {
		t.Fatalf("Load(missing) error = %v wraps ErrInvalid, want an I/O error", err)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"durability\": \"weekly\",\n  \"concurrency\": {\"lsp_requests\": 99}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load(bad) error = %v, want ErrInvalid", err)
	}
	ps := problems(t, err)
	if len(ps) != 2 {
		t.Fatalf("Load(bad) error = %v, want 2 problems", err)
	}
	for _, p := range ps {
		if p.File != bad || !strings.Contains(p.Error(), bad+":") {
			t.Errorf("problem %q does not name the file %s", p.Error(), bad)
		}
	}
	if want := "config: " + bad + ":2:17: durability: "; !strings.HasPrefix(ps[1].Error(), want) && !strings.HasPrefix(ps[0].Error(), want) {
		t.Errorf("Load(bad) error = %v, want a line starting %q", err, want)
	}

	syntax := filepath.Join(dir, "syntax.json")
	if err := os.WriteFile(syntax, []byte("{\n  \"memory\": tru\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(syntax)
	if want := "config: " + syntax + ":2:"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Load(syntax) error = %v, want prefix %q", err, want)
	}
}

func TestAgentHelpers(t *testing.T) {
	yes, no := true, false
	c := DefaultConfig()
	c.Agents = map[string]Agent{"serial": {ParallelToolCalls: &no}, "plain": {Mode: ModePlan}}
	if a, ok := c.AgentNamed("plain"); !ok || a.Mode != ModePlan {
		t.Fatalf("AgentNamed(plain) = %+v, %v", a, ok)
	}
	if _, ok := c.AgentNamed("nobody"); ok {
		t.Fatalf("AgentNamed(nobody) found an agent")
	}
	for _, tt := range []struct {
		session *bool
		agent   string
		want    bool
	}{
		{nil, "", true},
		{nil, "plain", true},
		{nil, "serial", false},
		{&no, "plain", false},
		{&no, "", false},
		{&yes, "serial", false},
	} {
		c.ParallelToolCalls = tt.session
		if got := c.ParallelToolCallsFor(tt.agent); got != tt.want {
			t.Errorf("ParallelToolCallsFor(%q) with session %v = %v, want %v", tt.agent, tt.session, got, tt.want)
		}
	}
}

// TestTenantPrincipals: the old {"token"} form and {"tokens"} entries
// without a principal authenticate as the tenant's name; a principal given
// is kept.
func TestTenantPrincipals(t *testing.T) {
	c, err := Parse([]byte(`{"tenants": {"acme": {"token": "t0", "tokens": [{"token": "t1", "principal": "alice@example.com"}, {"token": "t2"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Tenants["acme"].Principals("acme")
	want := []TenantToken{{Token: "t0", Principal: "acme"}, {Token: "t1", Principal: "alice@example.com"}, {Token: "t2", Principal: "acme"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Principals=%+v, want %+v", got, want)
	}
}

// TestTenantWorkers: a tenant's share of a class's workers is what its
// tenants.<t>.limits.workers_per_tenant sets, else limits.workers_per_tenant,
// else half of them on a node with tenants (at least 1), else all of them.
func TestTenantWorkers(t *testing.T) {
	tenants := `"tenants": {"a": {"token": "t"}}, `
	tests := []struct {
		name  string
		in    string
		class decl.Class
		want  int
	}{
		{"default without tenants", `{}`, decl.ClassExclusive, DefaultExclusiveWorkers},
		{"default with tenants", `{` + tenants + `"limits": {}}`, decl.ClassExclusive, DefaultExclusiveWorkers / 2},
		{"half of the class's workers", `{` + tenants + `"limits": {"workers": {"parallel_safe": 7}}}`, decl.ClassParallelSafe, 3},
		{"one worker is one tenant's", `{` + tenants + `"limits": {"workers": {"isolated_background": 1}}}`, decl.ClassIsolatedBackground, 1},
		{"set", `{` + tenants + `"limits": {"workers": {"exclusive": 4}, "workers_per_tenant": {"exclusive": 3}}}`, decl.ClassExclusive, 3},
		{"set without tenants", `{"limits": {"workers_per_tenant": {"exclusive": 3}}}`, decl.ClassExclusive, 3},
		{"an undeclared class is exclusive", `{"limits": {"workers": {"exclusive": 4}}}`, "", 4},
		{"the tenant's own", `{"tenants": {"a": {"token": "t", "limits": {"workers_per_tenant": {"exclusive": 1}}}}, "limits": {"workers": {"exclusive": 4}, "workers_per_tenant": {"exclusive": 3}}}`, decl.ClassExclusive, 1},
		{"the tenant's own, another class", `{"tenants": {"a": {"token": "t", "limits": {"workers_per_tenant": {"exclusive": 1}}}}, "limits": {"workers": {"parallel_safe": 8}}}`, decl.ClassParallelSafe, 4},
		{"a tenants_file's node shares", `{"tenants_file": "t.json", "limits": {"workers": {"exclusive": 4}}}`, decl.ClassExclusive, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.TenantWorkers(c.Tenants, "a", tt.class); got != tt.want {
				t.Fatalf("TenantWorkers(%q) = %d, want %d", tt.class, got, tt.want)
			}
		})
	}
}

// TestDocumentedExample: docs/configuration.md's typical file is a config
// the node accepts, with the worker share it shows.
func TestDocumentedExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```json\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md has no ```json block")
	}
	c, err := Parse([]byte(example))
	if err != nil {
		t.Fatalf("docs/configuration.md's example: %v", err)
	}
	if got := c.TenantWorkers(c.Tenants, "acme", decl.ClassExclusive); got != 16 {
		t.Fatalf("acme's exclusive workers = %d, want the example's 16", got)
	}
}
