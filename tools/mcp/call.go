package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/tool"
)

// call sends one tools/call for the server's tool remote and turns the
// answer into a result. The runtime has validated args against the tool's
// schema already; what the server answers decides the rest:
//
//   - not connected, or no free slot before ctx ends: tool.ErrNotSent
//     (nothing reached the server);
//   - ctx ended while the call was out: ctx's error (the runtime settles a
//     timeout or a cancellation by the call's replay policy);
//   - a JSON-RPC error from the server (unknown tool, invalid params): an
//     error, permanent when retrying cannot help;
//   - the session ended under the call: tool.ErrLost (settled by replay
//     policy: a never call is indeterminate);
//   - a result with isError: an error whose message is the result's text.
func (c *conn) call(ctx context.Context, remote string, args json.RawMessage) (tool.Result, error) {
	cs, err := c.acquire(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	defer c.release()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: remote, Arguments: args})
	if err != nil {
		return tool.Result{}, c.callError(ctx, err)
	}
	parts := contentParts(res.Content)
	if res.IsError {
		msg := textOf(parts)
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		return tool.Result{}, fmt.Errorf("%s", msg)
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, tool.Part{Type: tool.PartJSON, JSON: b})
		}
	}
	return tool.Result{Parts: parts}, nil
}

// acquire returns the session to send a call on, once one of the server's
// MaxInFlight slots is free. Both failures are tool.ErrNotSent.
func (c *conn) acquire(ctx context.Context) (*sdk.ClientSession, error) {
	cs, reason := c.current()
	if cs == nil {
		return nil, tool.NotSent(fmt.Errorf("the MCP server %q is not connected (%s); the call was not sent", c.cfg.Name, reason))
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, tool.NotSent(fmt.Errorf("no free connection to the MCP server %q before the call's time ran out (at most %d calls in flight, concurrency.mcp_connections); the call was not sent", c.cfg.Name, cap(c.slots)))
	}
	// The session may have ended while the call waited for a slot.
	if now, reason := c.current(); now != cs {
		c.release()
		if now == nil {
			return nil, tool.NotSent(fmt.Errorf("the MCP server %q is not connected (%s); the call was not sent", c.cfg.Name, reason))
		}
		return c.acquire(ctx)
	}
	return cs, nil
}

func (c *conn) release() { <-c.slots }

// callError classifies a failed request (see call).
func (c *conn) callError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("the MCP server %q: %w", c.cfg.Name, context.Cause(ctx))
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		e := fmt.Errorf("the MCP server %q refused the call: %s (code %d)", c.cfg.Name, je.Message, je.Code)
		switch je.Code {
		case jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams, jsonrpc.CodeInvalidRequest:
			return tool.Permanent(e)
		}
		return e
	}
	// Anything else is the transport: the request went out (or may have),
	// and no answer came back.
	// (How the server ended, with its stderr, goes to the node's log.)
	return tool.Lost(fmt.Errorf("the MCP server %q went away while the call ran (%v); whether it took effect is unknown", c.cfg.Name, err))
}

// contentParts converts MCP content to result parts: text and images as
// they are, everything else (resource links, embedded resources, audio) as
// JSON the model can read.
func contentParts(content []sdk.Content) []tool.Part {
	var parts []tool.Part
	for _, ct := range content {
		switch x := ct.(type) {
		case *sdk.TextContent:
			parts = append(parts, tool.Part{Type: tool.PartText, Text: x.Text})
		case *sdk.ImageContent:
			parts = append(parts, tool.Part{Type: tool.PartImage, MIME: x.MIMEType, Data: x.Data})
		case *sdk.EmbeddedResource:
			parts = append(parts, resourceParts(x.Resource)...)
		case *sdk.ResourceLink:
			parts = append(parts, jsonPart(map[string]any{
				"type": "resource_link", "uri": x.URI, "name": x.Name, "title": x.Title,
				"description": x.Description, "mimeType": x.MIMEType,
			}))
		case *sdk.AudioContent:
			parts = append(parts, jsonPart(map[string]any{"type": "audio", "mimeType": x.MIMEType, "bytes": len(x.Data), "data": x.Data}))
		default:
			if b, err := json.Marshal(ct); err == nil {
				parts = append(parts, tool.Part{Type: tool.PartJSON, JSON: b})
			}
		}
	}
	return parts
}

// resourceParts converts one resource's contents: text as text, an image
// blob as an image, any other blob as JSON with its bytes in base64.
func resourceParts(r *sdk.ResourceContents) []tool.Part {
	switch {
	case r == nil:
		return nil
	case r.Blob == nil:
		return []tool.Part{{Type: tool.PartText, Text: r.Text}}
	case strings.HasPrefix(r.MIMEType, "image/"):
		return []tool.Part{{Type: tool.PartImage, MIME: r.MIMEType, Data: r.Blob}}
	}
	return []tool.Part{jsonPart(map[string]any{"uri": r.URI, "mimeType": r.MIMEType, "blob": r.Blob})}
}

func jsonPart(v any) tool.Part {
	b, _ := json.Marshal(v) // maps of strings, numbers and []byte always marshal
	return tool.Part{Type: tool.PartJSON, JSON: b}
}

func textOf(parts []tool.Part) string {
	var lines []string
	for _, p := range parts {
		switch p.Type {
		case tool.PartText:
			lines = append(lines, p.Text)
		case tool.PartJSON:
			lines = append(lines, string(p.JSON))
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
