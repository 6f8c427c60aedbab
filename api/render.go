package api

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/tool"
)

// Format names a model provider's tool-definition format.
type Format string

// The formats GET /v1/tools renders. FormatOpenAI is the default.
const (
	// FormatOpenAI is [{"type": "function", "function": {"name",
	// "description", "parameters"}}].
	FormatOpenAI Format = "openai"
	// FormatAnthropic is [{"name", "description", "input_schema"}].
	FormatAnthropic Format = "anthropic"
)

// emptySchema is the input schema of a tool that declares none: an object
// without properties, which every provider accepts.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// Definitions is the answer of GET /v1/tools: the tool definitions a model is
// given, in one provider's format, and the system-prompt text that carries
// the tools' guidance when the guidance is placed there.
type Definitions struct {
	// Format is the format Tools are in.
	Format Format `json:"format"`
	// Tools are the definitions, sorted by tool name, never null.
	Tools any `json:"tools"`
	// System is the guidance text for the system prompt: present with
	// placement "system" when any tool has guidance to show.
	System string `json:"system,omitempty"`
}

type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ParseFormat returns the format named s; empty means FormatOpenAI. An
// unknown name is an error saying which names exist.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", FormatOpenAI:
		return FormatOpenAI, nil
	case FormatAnthropic:
		return FormatAnthropic, nil
	}
	return "", fmt.Errorf("format %q is not one of openai, anthropic", s)
}

// Render builds the definitions of tools (in the order given) in format,
// placing their guidelines and snippets as g says:
//
//   - placement "system" (the default, also for an empty placement): the
//     descriptions stay as they are and Definitions.System gathers the
//     guidance of every tool;
//   - placement "description": each tool's guidance is appended to its
//     description and System is empty;
//   - g.Guidelines or g.Snippets set to false drop that part of the guidance;
//   - g.Budget > 0: when the tool section (every description plus System)
//     is longer than Budget bytes, each tool's short description replaces
//     its description. The guidance is kept: it has its own switches.
//
// Render is pure: the same tools and guidance give the same definitions.
func Render(tools []*tool.Tool, g config.Guidance, format Format) (Definitions, error) {
	if _, err := ParseFormat(string(format)); err != nil {
		return Definitions{}, err
	}
	if format == "" {
		format = FormatOpenAI
	}
	switch g.Placement {
	case "", config.PlacementSystem, config.PlacementDescription:
	default:
		return Definitions{}, fmt.Errorf("guidance placement %q is not one of system, description", g.Placement)
	}
	descs, system := describe(tools, g, false)
	if g.Budget > 0 && size(descs, system) > g.Budget {
		descs, system = describe(tools, g, true)
	}
	d := Definitions{Format: format, System: system}
	switch format {
	case FormatAnthropic:
		out := make([]anthropicTool, len(tools))
		for i, t := range tools {
			out[i] = anthropicTool{Name: t.Name, Description: descs[i], InputSchema: schemaOf(t)}
		}
		d.Tools = out
	default:
		out := make([]openAITool, len(tools))
		for i, t := range tools {
			out[i] = openAITool{Type: "function", Function: openAIFunction{Name: t.Name, Description: descs[i], Parameters: schemaOf(t)}}
		}
		d.Tools = out
	}
	return d, nil
}

// describe returns each tool's model-visible description and the system
// guidance text, using short descriptions when short is set.
func describe(tools []*tool.Tool, g config.Guidance, short bool) ([]string, string) {
	guidelines := g.Guidelines == nil || *g.Guidelines
	snippets := g.Snippets == nil || *g.Snippets
	inDescription := g.Placement == config.PlacementDescription
	descs := make([]string, len(tools))
	var system []string
	for i, t := range tools {
		desc := t.Description
		if short {
			desc = t.Short()
		}
		guide := guidance(t, guidelines, snippets)
		switch {
		case guide == "":
		case inDescription:
			desc += "\n\n" + guide
		default:
			system = append(system, "## "+t.Name+"\n\n"+guide)
		}
		descs[i] = desc
	}
	if len(system) == 0 {
		return descs, ""
	}
	return descs, "# Tool guidelines\n\n" + strings.Join(system, "\n\n")
}

// guidance renders one tool's guidelines as a list and its snippet as an
// example, leaving out what is switched off or empty.
func guidance(t *tool.Tool, guidelines, snippets bool) string {
	var parts []string
	if guidelines {
		var lines []string
		for _, g := range t.Guidelines {
			if g = strings.TrimSpace(g); g != "" {
				lines = append(lines, "- "+g)
			}
		}
		if len(lines) > 0 {
			parts = append(parts, "Guidelines:\n"+strings.Join(lines, "\n"))
		}
	}
	if s := strings.TrimSpace(t.Snippet); snippets && s != "" {
		parts = append(parts, "Example:\n"+s)
	}
	return strings.Join(parts, "\n\n")
}

// size is the byte length of the tool section: every description and the
// system guidance.
func size(descs []string, system string) int {
	n := len(system)
	for _, d := range descs {
		n += len(d)
	}
	return n
}

func schemaOf(t *tool.Tool) json.RawMessage {
	if len(t.InputSchema) == 0 {
		return emptySchema
	}
	return t.InputSchema
}
