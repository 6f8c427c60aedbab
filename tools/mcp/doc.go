// Package mcp makes the tools of MCP servers tools of callsheet (docs/spec.md
// §7 "MCP", docs/mcp.md). It speaks the protocol through the official Go SDK
// (github.com/modelcontextprotocol/go-sdk); nothing of the protocol is
// written by hand here.
//
// A Manager holds one connection per configured server: a program it starts
// and talks to over stdio, or a streamable HTTP endpoint. Each server's tool
// T is registered, through a Registry (a *tool.Registry), as the tool
// mcp__SERVER__T (ToolName: sanitised to the provider rule
// ^[a-zA-Z0-9_-]{1,64}$, with a stable short hash where the name would pass
// 64 characters; two tools of one server that come out the same are refused
// with a message naming both). A server that advertises resources also gets
// one read-only tool, mcp__SERVER__read_resource, which lists the server's
// resources and reads one by URI.
//
// Declarations. An MCP server's annotations are claims made by the server,
// which may be anyone's code, so by default they are labels for approvers
// (a destructive tool is labelled irreversible, an open-world one external)
// and never declarations: every tool is side_effecting, never and exclusive,
// so strict mode asks before each call. With TrustAnnotations a readOnlyHint
// declares read_only, safe and parallel_safe and an idempotentHint declares
// safe; an Override (from config) wins over both (Declare).
//
// Calls. The node validates a call's arguments against the server's input
// schema before the call is sent (the schema is the tool's InputSchema, held
// to callsheet's strict rules, see tool.CompileSchema). At most MaxInFlight
// calls per server are in flight; the rest wait within their timeout and
// fail as not sent (tool.ErrNotSent) if it ends first. A call whose server
// goes away while it runs fails with tool.ErrLost, so the runtime settles it
// by its replay policy: a never call is indeterminate and is not run again,
// a safe one is retried once the server is back.
//
// Lifecycle. Start runs one supervising goroutine per server: it connects
// (starting the program), lists the tools, registers them, and then waits
// for the session to end, picking up notifications/tools/list_changed by
// listing again. A server that exits or drops the connection is restarted
// (reconnected) with exponential backoff; its tools stay registered
// meanwhile, and a call made while it is down fails at once as not sent. A
// server that cannot start leaves its tools unavailable: Unavailable says
// why, for the plan's blocked/unavailable reason, and Start's statuses say
// so for the node's start-up log. Close ends every session (terminating the
// programs) and waits for the supervisors.
package mcp
