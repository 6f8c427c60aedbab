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
	// FormatOpenAI is OpenAI's Chat Completions form: [{"type": "function",
	// "function": {"name", "description", "parameters", "strict"?}}].
	FormatOpenAI Format = "openai"
	// FormatOpenAIResponses is OpenAI's Responses API form, flat:
	// [{"type": "function", "name", "description", "parameters", "strict"}].
	FormatOpenAIResponses Format = "openai_responses"
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
	// Strict is true when the schemas were rewritten for OpenAI's strict
	// mode (StrictSchema).
	Strict bool `json:"strict,omitempty"`
	// NotStrict names each tool whose schema strict mode cannot express,
	// and why; such a tool is given with "strict": false and its schema as
	// it is. Present with Strict only.
	NotStrict []StrictProblem `json:"not_strict,omitempty"`
	// StrictNotes say what the rewriting left out of a schema that strict
	// mode does not support (the node still checks calls against it).
	StrictNotes []StrictProblem `json:"strict_notes,omitempty"`
}

// StrictProblem is one tool's schema problem or note under strict mode.
type StrictProblem struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// Strict is sent only when strict schemas were asked for, so the
	// default answer stays what it was.
	Strict *bool `json:"strict,omitempty"`
}

// responsesTool is a tool of OpenAI's Responses API: flat, and strict is
// always said (the API's default for an absent strict is true).
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
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
	case FormatOpenAIResponses:
		return FormatOpenAIResponses, nil
	case FormatAnthropic:
		return FormatAnthropic, nil
	}
	return "", fmt.Errorf("format %q is not one of openai, openai_responses, anthropic", s)
}

// RenderOption changes what Render gives.
type RenderOption func(*renderOptions)

type renderOptions struct{ strict bool }

// WithStrict rewrites every schema for OpenAI's strict mode (StrictSchema)
// and marks the tools "strict": true; a tool whose schema cannot be made
// strict keeps its schema, is marked "strict": false, and is named in
// Definitions.NotStrict with the reason. Only the OpenAI formats have a
// strict mode: with FormatAnthropic Render fails.
func WithStrict(strict bool) RenderOption {
	return func(o *renderOptions) { o.strict = strict }
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
func Render(tools []*tool.Tool, g config.Guidance, format Format, opts ...RenderOption) (Definitions, error) {
	if _, err := ParseFormat(string(format)); err != nil {
		return Definitions{}, err
	}
	if format == "" {
		format = FormatOpenAI
	}
	var o renderOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.strict && format == FormatAnthropic {
		return Definitions{}, fmt.Errorf("strict schemas are OpenAI's strict mode: use format openai or openai_responses, or leave strict out for anthropic")
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
	d := Definitions{Format: format, System: system, Strict: o.strict}
	schemas := make([]json.RawMessage, len(tools))
	strict := make([]bool, len(tools))
	for i, t := range tools {
		schemas[i] = schemaOf(t)
		if !o.strict {
			continue
		}
		s, notes, err := StrictSchema(schemas[i])
		if err != nil {
			d.NotStrict = append(d.NotStrict, StrictProblem{Tool: t.Name, Reason: strings.TrimPrefix(err.Error(), ErrNotStrict.Error()+": ")})
			continue
		}
		schemas[i], strict[i] = s, true
		for _, n := range notes {
			d.StrictNotes = append(d.StrictNotes, StrictProblem{Tool: t.Name, Reason: n})
		}
	}
	switch format {
	case FormatAnthropic:
		out := make([]anthropicTool, len(tools))
		for i, t := range tools {
			out[i] = anthropicTool{Name: t.Name, Description: descs[i], InputSchema: schemas[i]}
		}
		d.Tools = out
	case FormatOpenAIResponses:
		out := make([]responsesTool, len(tools))
		for i, t := range tools {
			out[i] = responsesTool{Type: "function", Name: t.Name, Description: descs[i], Parameters: schemas[i], Strict: strict[i]}
		}
		d.Tools = out
	default:
		out := make([]openAITool, len(tools))
		for i, t := range tools {
			f := openAIFunction{Name: t.Name, Description: descs[i], Parameters: schemas[i]}
			if o.strict {
				f.Strict = &strict[i]
			}
			out[i] = openAITool{Type: "function", Function: f}
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
