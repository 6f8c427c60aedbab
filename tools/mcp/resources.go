package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/tool"
)

// resourceArgs are the arguments of a server's resource tool.
type resourceArgs struct {
	URI    string `json:"uri,omitempty" jsonschema:"the URI of the resource to read, as the listing gives it; leave it out to list the server's resources"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of a previous listing, for its next page"`
}

// resourceListing is what the resource tool answers without a uri.
type resourceListing struct {
	Resources  []resourceEntry `json:"resources"`
	Templates  []resourceEntry `json:"templates,omitempty"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

type resourceEntry struct {
	URI         string `json:"uri,omitempty"`
	URITemplate string `json:"uri_template,omitempty"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mime_type,omitempty"`
	Size        int64  `json:"size,omitempty"`
}

// resourceTool is the one read-only tool that lists a server's resources
// (resources/list and, on the first page, resources/templates/list) and
// reads one (resources/read). Reading is what the protocol defines a
// resource for, so it is declared read_only, safe and parallel_safe
// whatever the server's trust (docs/spec.md §7 "MCP": "resources as a
// read-only tool").
func (c *conn) resourceTool() *tool.Tool {
	t, err := tool.New(ToolName(c.cfg.Name, ResourceTool),
		fmt.Sprintf("List or read the resources of the MCP server %q: without uri, lists them (uri, name, description, MIME type); with uri, returns that resource's contents.", c.cfg.Name),
		func(ctx context.Context, a resourceArgs) (tool.Result, error) {
			cs, err := c.acquire(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			defer c.release()
			if a.URI == "" {
				return c.listResources(ctx, cs, a.Cursor)
			}
			res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: a.URI})
			if err != nil {
				return tool.Result{}, c.callError(ctx, err)
			}
			var parts []tool.Part
			for _, rc := range res.Contents {
				parts = append(parts, resourceParts(rc)...)
			}
			return tool.Result{Parts: parts}, nil
		},
		tool.WithShortDescription(fmt.Sprintf("List or read the MCP server %q's resources.", c.cfg.Name)),
		tool.WithGuidelines(
			"Call it without arguments first to see which resources exist, then with the uri of the one you need.",
			fmt.Sprintf("Provided for the MCP server %q; a listing with next_cursor has more pages: pass it as cursor.", c.cfg.Name)),
		tool.WithSnippet(`{"uri": "file:///README.md"}`),
		tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}),
	)
	if err != nil {
		panic(fmt.Sprintf("mcp: the resource tool is invalid: %v", err)) // a fixed definition: a bug if it fails
	}
	return t
}

func (c *conn) listResources(ctx context.Context, cs *sdk.ClientSession, cursor string) (tool.Result, error) {
	res, err := cs.ListResources(ctx, &sdk.ListResourcesParams{Cursor: cursor})
	if err != nil {
		return tool.Result{}, c.callError(ctx, err)
	}
	out := resourceListing{Resources: []resourceEntry{}, NextCursor: res.NextCursor}
	for _, r := range res.Resources {
		out.Resources = append(out.Resources, resourceEntry{URI: r.URI, Name: r.Name, Title: r.Title, Description: r.Description, MIMEType: r.MIMEType, Size: r.Size})
	}
	if cursor == "" {
		// Templates are a convenience: a server without them may answer
		// method-not-found, which is no failure of the listing.
		if tr, err := cs.ListResourceTemplates(ctx, nil); err == nil {
			for _, r := range tr.ResourceTemplates {
				out.Templates = append(out.Templates, resourceEntry{URITemplate: r.URITemplate, Name: r.Name, Title: r.Title, Description: r.Description, MIMEType: r.MIMEType})
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Parts: []tool.Part{{Type: tool.PartJSON, JSON: b}}}, nil
}
