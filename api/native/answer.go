package native

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// ChatAnswer is a turn's answer in the OpenAI Chat format: one tool message
// per call in call order, then, when the model must see more, one user
// message (the images the calls returned, which a tool message cannot
// carry, and the turn's retry notices). Messages is assignable to the
// openai package's ChatCompletionMessageParam[].
type ChatAnswer struct {
	Turn     string        `json:"turn"`
	Messages []ChatMessage `json:"messages"`
}

// ChatMessage is a tool message (Content a string) or a user message
// (Content a list of ChatPart).
type ChatMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Content    any    `json:"content"`
}

// ChatPart is a user message's text or image_url part.
type ChatPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL is a Chat image part's image, as a data URL.
type ImageURL struct {
	URL string `json:"url"`
}

// ResponsesAnswer is a turn's answer in the OpenAI Responses format: one
// function_call_output item per call in call order, then a user message
// item with the retry notices when the turn has any. Input is assignable
// to the openai package's ResponseInputItem[].
type ResponsesAnswer struct {
	Turn  string `json:"turn"`
	Input []any  `json:"input"`
}

// FunctionCallOutput is a Responses function_call_output item: Output is
// a string, or a list of ResponsesPart when the result holds an image.
type FunctionCallOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output any    `json:"output"`
}

// ResponsesMessage is a Responses user message input item.
type ResponsesMessage struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content []ResponsesPart `json:"content"`
}

// ResponsesPart is an input_text or input_image content part.
type ResponsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// AnthropicAnswer is a turn's answer in the Anthropic format: one user
// message whose content is a tool_result block per call in call order,
// then a text block per retry notice. Message is assignable to the
// @anthropic-ai/sdk package's MessageParam.
type AnthropicAnswer struct {
	Turn    string           `json:"turn"`
	Message AnthropicMessage `json:"message"`
}

// AnthropicMessage is the user message of an AnthropicAnswer.
type AnthropicMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

// ToolResult is an Anthropic tool_result block: Content a string, or a
// list of AnthropicBlock when the result holds an image. IsError is set
// for blocked and failed calls.
type ToolResult struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   any    `json:"content"`
	IsError   bool   `json:"is_error,omitempty"`
}

// AnthropicBlock is a text or image content block.
type AnthropicBlock struct {
	Type   string       `json:"type"`
	Text   string       `json:"text,omitempty"`
	Source *ImageSource `json:"source,omitempty"`
}

// ImageSource is an Anthropic base64 image source.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// Answer renders a complete turn in format f: a ChatAnswer, a
// ResponsesAnswer or an AnthropicAnswer. Every call gets exactly one
// answer, in call order, as each provider requires before the model's next
// request. A result's text is its text and JSON parts in order; a call that
// did not succeed begins with its outcome in brackets ("[blocked:
// invalid_arguments; it did not run] ..."), so the model can tell without
// an is_error flag, which only Anthropic has. Images of the types every
// provider takes (PNG, JPEG, GIF, WebP) are given as images; any other
// type is named in the text instead. An unknown format is an error
// wrapping ErrFormat.
func Answer(f Format, t projections.Turn) (any, error) {
	switch f {
	case OpenAIChat:
		return chatAnswer(t), nil
	case OpenAIResponses:
		return responsesAnswer(t), nil
	case Anthropic:
		return anthropicAnswer(t), nil
	}
	_, err := ParseFormat(string(f))
	return nil, err
}

func chatAnswer(t projections.Turn) ChatAnswer {
	a := ChatAnswer{Turn: t.Turn, Messages: []ChatMessage{}}
	var extra []ChatPart
	for _, r := range t.Results {
		text, images := render(r)
		if len(images) > 0 {
			text += fmt.Sprintf("\n[%s returned: shown in the user message after the tool messages]", plural(len(images), "image"))
			extra = append(extra, ChatPart{Type: "text", Text: fmt.Sprintf("Images returned by call %s (%s):", r.ID, r.Name)})
			for _, p := range images {
				extra = append(extra, ChatPart{Type: "image_url", ImageURL: &ImageURL{URL: dataURL(p)}})
			}
		}
		a.Messages = append(a.Messages, ChatMessage{Role: "tool", ToolCallID: r.ID, Content: text})
	}
	for _, n := range t.Notices {
		extra = append(extra, ChatPart{Type: "text", Text: noticeText(n)})
	}
	if len(extra) > 0 {
		a.Messages = append(a.Messages, ChatMessage{Role: "user", Content: extra})
	}
	return a
}

func responsesAnswer(t projections.Turn) ResponsesAnswer {
	a := ResponsesAnswer{Turn: t.Turn, Input: []any{}}
	for _, r := range t.Results {
		text, images := render(r)
		out := FunctionCallOutput{Type: "function_call_output", CallID: r.ID, Output: text}
		if len(images) > 0 {
			parts := []ResponsesPart{{Type: "input_text", Text: text}}
			for _, p := range images {
				parts = append(parts, ResponsesPart{Type: "input_image", ImageURL: dataURL(p), Detail: "auto"})
			}
			out.Output = parts
		}
		a.Input = append(a.Input, out)
	}
	if len(t.Notices) > 0 {
		m := ResponsesMessage{Type: "message", Role: "user"}
		for _, n := range t.Notices {
			m.Content = append(m.Content, ResponsesPart{Type: "input_text", Text: noticeText(n)})
		}
		a.Input = append(a.Input, m)
	}
	return a
}

func anthropicAnswer(t projections.Turn) AnthropicAnswer {
	a := AnthropicAnswer{Turn: t.Turn, Message: AnthropicMessage{Role: "user", Content: []any{}}}
	for _, r := range t.Results {
		text, images := render(r)
		tr := ToolResult{Type: "tool_result", ToolUseID: r.ID, Content: text,
			IsError: r.Outcome == events.OutcomeBlocked || r.Outcome == events.OutcomeError}
		if len(images) > 0 {
			blocks := []AnthropicBlock{{Type: "text", Text: text}}
			for _, p := range images {
				blocks = append(blocks, AnthropicBlock{Type: "image", Source: &ImageSource{Type: "base64", MediaType: p.MIME, Data: base64.StdEncoding.EncodeToString(p.Data)}})
			}
			tr.Content = blocks
		}
		a.Message.Content = append(a.Message.Content, tr)
	}
	for _, n := range t.Notices {
		a.Message.Content = append(a.Message.Content, AnthropicBlock{Type: "text", Text: noticeText(n)})
	}
	return a
}

// imageTypes are the image types every provider accepts in a conversation.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// render returns a result's model-visible text and the images to give as
// images. The text is never empty: providers refuse empty text blocks.
func render(r events.Result) (string, []events.Part) {
	var b strings.Builder
	switch r.Outcome {
	case events.OutcomeBlocked:
		fmt.Fprintf(&b, "[blocked: %s; the call did not run] ", r.Block)
	case events.OutcomeError:
		b.WriteString("[error] ")
	case events.OutcomeIndeterminate:
		b.WriteString("[indeterminate] ")
	}
	var images []events.Part
	sep := ""
	for _, p := range r.Content {
		switch p.Type {
		case "text":
			b.WriteString(sep + p.Text)
		case "json":
			b.WriteString(sep + string(p.JSON))
		case "image":
			if imageTypes[strings.ToLower(p.MIME)] && len(p.Data) > 0 {
				p.MIME = strings.ToLower(p.MIME)
				images = append(images, p)
				continue
			}
			fmt.Fprintf(&b, "%s[an image of type %q (%d bytes) is not shown: models take PNG, JPEG, GIF and WebP images]", sep, p.MIME, len(p.Data))
		default:
			fmt.Fprintf(&b, "%s[a %q part is not shown]", sep, p.Type)
		}
		sep = "\n"
	}
	if strings.TrimSpace(b.String()) == "" {
		b.WriteString("(no output)")
	}
	return strings.TrimRight(b.String(), " "), images
}

func noticeText(n projections.Notice) string { return "Retry notice: " + n.Message }

func dataURL(p events.Part) string {
	return "data:" + p.MIME + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
