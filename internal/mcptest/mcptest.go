// Package mcptest is a small MCP server for tests, built on the official Go
// SDK and run as a real process over stdio: a test binary calls
// ServeIfHelper first thing in TestMain, and a test starts the binary itself
// (os.Args[0]) with Env set, as the MCP server's command. It offers what the
// third-party servers cannot be made to do on cue: change its tool list,
// exit in the middle of a call, count its runs and report how many calls
// overlapped.
//
// Tools: echo {text}; slow {ms} (appends "run" to $MCPTEST_LOG when set,
// then sleeps); peak {} (the most slow calls that ever overlapped);
// add_tool {name} and remove_tool {name} (change the list, which sends
// notifications/tools/list_changed); exit {code} (the process exits at once,
// mid-call); crash_once {} (appends "run" to $MCPTEST_LOG; on the log's
// first run the process exits mid-call, on later ones it answers
// "survived"). One resource: mem://hello.
package mcptest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Env is the variable that makes a test binary serve instead of testing.
const Env = "CALLSHEET_MCPTEST_SERVER"

// LogEnv names the file slow appends one line to per run.
const LogEnv = "MCPTEST_LOG"

// ServeIfHelper serves the helper on stdio and exits when Env is "1"; it
// returns at once otherwise.
func ServeIfHelper() {
	if os.Getenv(Env) != "1" {
		return
	}
	if err := NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type echoArgs struct {
	Text string `json:"text"`
}

type slowArgs struct {
	MS int `json:"ms"`
}

type nameArgs struct {
	Name string `json:"name"`
}

type exitArgs struct {
	Code int `json:"code"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// NewServer returns the helper server, ready to Run on a transport.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	var running, peak atomic.Int64
	var logMu sync.Mutex
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo text back.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return text(a.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Sleep for ms milliseconds.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, a slowArgs) (*mcp.CallToolResult, any, error) {
			if p := os.Getenv(LogEnv); p != "" {
				logMu.Lock()
				f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					fmt.Fprintln(f, "run")
					f.Close()
				}
				logMu.Unlock()
			}
			n := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return text("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "peak", Description: "How many slow calls overlapped at most."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(peak.Load())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Add a tool named name (it echoes)."},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: a.Name, Description: "Added at run time."},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return text("added tool " + a.Name), nil, nil
				})
			return text("added " + a.Name), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "remove_tool", Description: "Remove the tool named name."},
		func(_ context.Context, _ *mcp.CallToolRequest, a nameArgs) (*mcp.CallToolResult, any, error) {
			s.RemoveTools(a.Name)
			return text("removed " + a.Name), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash_once", Description: "Exit mid-call the first time, answer later times."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			p := os.Getenv(LogEnv)
			logMu.Lock()
			f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintln(f, "run")
				f.Close()
			}
			b, _ := os.ReadFile(p)
			logMu.Unlock()
			if strings.Count(string(b), "run") == 1 {
				fmt.Fprintln(os.Stderr, "mcptest: crashing on the first run")
				os.Exit(9)
			}
			return text("survived"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "exit", Description: "Exit the server process at once, mid-call."},
		func(_ context.Context, _ *mcp.CallToolRequest, a exitArgs) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, "mcptest: exiting as asked")
			os.Exit(a.Code)
			return nil, nil, nil
		})
	s.AddResource(&mcp.Resource{URI: "mem://hello", Name: "hello", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "mem://hello", MIMEType: "text/plain", Text: "hello from a resource"}}}, nil
		})
	return s
}
