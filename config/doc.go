// Package config is callsheet's node configuration: the JSON file of docs/spec.md §6
// given with --config, as plain data (Config), its defaults (DefaultConfig)
// and its validation (Config.Validate). It imports nothing of callsheet's;
// the packages that act on a setting convert it to their own types (a
// command tool's "effect" string becomes a tool.Effect, and so on).
//
// Every field is optional. Parse and Load decode strictly (unknown or
// misspelt fields, duplicate keys, wrong types and trailing data are
// refused), keep every value the file gives, fill the rest from
// DefaultConfig, and validate. Invalid configuration is refused at start-up
// with the JSON path, the position and the reason:
//
//	config: callsheet.json:3:19: concurrency.tool_calls: 0 is out of range 1..64 (set a value from 1 to 64; 1 runs calls one at a time)
//
// Every such error wraps ErrInvalid; validation reports all problems at
// once, joined.
//
// Durations ("timeout", "retry.initial_delay", ...) are written as Go
// duration strings ("5s", "250ms", "1m30s") or as whole numbers of
// milliseconds.
//
// A small file, with every default spelt out:
//
//	{
//	  "concurrency": {"tool_calls": 8, "delegations": 8, "mcp_connections": 8, "lsp_requests": 4},
//	  "tools": {"webfetch": false},
//	  "permission": {"strict": false, "rules": [{"tool": "shell", "match": "git *", "action": "allow"}]},
//	  "agents": {"plan": {"mode": "plan"}, "reviewer": {"tools": ["read", "grep", "glob"]}},
//	  "tool_output": {"max_bytes": 51200, "max_lines": 2000},
//	  "durability": "fsync",
//	  "retry": {"initial_delay": "200ms", "factor": 2, "max_delay": "10s", "max_attempts": 3},
//	  "timeouts": {"default": "120s"},
//	  "limits": {"body_bytes": 8388608, "calls_per_turn": 1000, "output_bytes_per_call": 67108864,
//	             "output_bytes_per_tenant": 4294967296, "sessions_per_tenant": 10000,
//	             "calls_in_flight_per_tenant": 4096,
//	             "workers": {"exclusive": 64, "parallel_safe": 256, "isolated_background": 64}}
//	}
//
// testdata/full.json uses every field; the doc comment of each field in
// Config states its meaning and default.
//
// Nothing here does I/O except Load, which reads one file. A Config is plain
// data: share it for reading, copy it to change it.
package config
