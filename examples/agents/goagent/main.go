// Command goagent is an agent loop on the official Go SDKs, openai-go
// (Chat Completions or Responses) or anthropic-sdk-go (Messages), whose
// tools callsheet runs through the Go client: each response is posted as
// the SDK returned it, and the answer decodes into the SDK's own param
// types to append (docs/clients.md).
//
//	goagent --provider openai_chat|openai_responses|anthropic
//
// Environment: CALLSHEET_URL, CALLSHEET_TOKEN, and OPENAI_BASE_URL or
// ANTHROPIC_BASE_URL (the fake model server in CI: examples/agents/fakemodel).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/callsheet/callsheet/client"
)

const prompt = "Write notes.txt, then read it back to me."

func main() {
	provider := flag.String("provider", "openai_chat", "openai_chat, openai_responses or anthropic")
	flag.Parse()
	ctx := context.Background()
	cs, err := client.New(os.Getenv("CALLSHEET_URL"), client.WithToken(os.Getenv("CALLSHEET_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	s, err := cs.OpenSession(ctx, client.SessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	switch *provider {
	case "openai_chat":
		err = chat(ctx, cs, s)
	case "openai_responses":
		err = respond(ctx, cs, s)
	case "anthropic":
		err = claude(ctx, cs, s)
	default:
		err = fmt.Errorf("--provider %q: use openai_chat, openai_responses or anthropic", *provider)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func show(step int, raw json.RawMessage) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		items = []json.RawMessage{raw}
	}
	for _, it := range items {
		s := string(it)
		if len(s) > 110 {
			s = s[:110] + "..."
		}
		fmt.Printf("step %d: %s\n", step, s)
	}
}

func chat(ctx context.Context, cs *client.Client, s *client.Session) error {
	oc := openai.NewClient(option.WithBaseURL(os.Getenv("OPENAI_BASE_URL")), option.WithAPIKey("unused"))
	defs, err := cs.Tools(ctx, "openai", "")
	if err != nil {
		return err
	}
	var tools []openai.ChatCompletionToolUnionParam
	if err := defs.DecodeTools(&tools); err != nil {
		return err
	}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}
	for step := 1; step <= 10; step++ {
		c, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: msgs, Tools: tools})
		if err != nil {
			return err
		}
		m := c.Choices[0].Message
		msgs = append(msgs, m.ToParam())
		if len(m.ToolCalls) == 0 {
			fmt.Println("final:", m.Content)
			return nil
		}
		ans, err := s.TurnNative(ctx, client.OpenAIChat, c)
		if err != nil {
			return err
		}
		var results []openai.ChatCompletionMessageParamUnion
		if err := ans.Decode(&results); err != nil {
			return err
		}
		show(step, ans.Messages)
		msgs = append(msgs, results...)
	}
	return fmt.Errorf("no final answer in 10 steps")
}

func respond(ctx context.Context, cs *client.Client, s *client.Session) error {
	oc := openai.NewClient(option.WithBaseURL(os.Getenv("OPENAI_BASE_URL")), option.WithAPIKey("unused"))
	defs, err := cs.Tools(ctx, "openai_responses", "")
	if err != nil {
		return err
	}
	var tools []responses.ToolUnionParam
	if err := defs.DecodeTools(&tools); err != nil {
		return err
	}
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(prompt, responses.EasyInputMessageRoleUser)}
	for step := 1; step <= 10; step++ {
		r, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}, Tools: tools, Store: openai.Bool(false)})
		if err != nil {
			return err
		}
		calls := 0
		for _, o := range r.Output {
			var in responses.ResponseInputItemUnionParam
			if err := json.Unmarshal([]byte(o.RawJSON()), &in); err != nil {
				return err
			}
			input = append(input, in)
			if o.Type == "function_call" {
				calls++
			}
		}
		if calls == 0 {
			fmt.Println("final:", r.OutputText())
			return nil
		}
		ans, err := s.TurnNative(ctx, client.OpenAIResponses, r)
		if err != nil {
			return err
		}
		var items []responses.ResponseInputItemUnionParam
		if err := ans.Decode(&items); err != nil {
			return err
		}
		show(step, ans.Input)
		input = append(input, items...)
	}
	return fmt.Errorf("no final answer in 10 steps")
}

func claude(ctx context.Context, cs *client.Client, s *client.Session) error {
	ac := anthropic.NewClient(aoption.WithBaseURL(os.Getenv("ANTHROPIC_BASE_URL")), aoption.WithAPIKey("unused"))
	defs, err := cs.Tools(ctx, "anthropic", "")
	if err != nil {
		return err
	}
	var tools []anthropic.ToolUnionParam
	if err := defs.DecodeTools(&tools); err != nil {
		return err
	}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}
	for step := 1; step <= 10; step++ {
		m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, Messages: msgs, Tools: tools})
		if err != nil {
			return err
		}
		msgs = append(msgs, m.ToParam())
		if m.StopReason != anthropic.StopReasonToolUse {
			var text []string
			for _, b := range m.Content {
				text = append(text, b.Text)
			}
			fmt.Println("final:", strings.Join(text, ""))
			return nil
		}
		ans, err := s.TurnNative(ctx, client.Anthropic, m)
		if err != nil {
			return err
		}
		var results anthropic.MessageParam
		if err := ans.Decode(&results); err != nil {
			return err
		}
		show(step, ans.Message)
		msgs = append(msgs, results)
	}
	return fmt.Errorf("no final answer in 10 steps")
}
