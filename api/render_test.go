package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/tool"
)

func testTools() []*tool.Tool {
	return []*tool.Tool{
		{
			Name: "read", Description: "Read a file from the workspace, with line ranges.", ShortDescription: "Read a file.",
			Guidelines:  []string{"Read before you edit.", " ", "Prefer ranges for big files."},
			Snippet:     `{"path": "main.go"}`,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		},
		{
			Name: "write", Description: "Create or replace a whole file.",
			Guidelines: []string{"Only for new files or deliberate rewrites."},
		},
	}
}

func bptr(b bool) *bool { return &b }

func TestRenderFormats(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		want   string
	}{
		{"openai", FormatOpenAI, `[{"type":"function","function":{"name":"read","description":"Read a file from the workspace, with line ranges.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},{"type":"function","function":{"name":"write","description":"Create or replace a whole file.","parameters":{"type":"object","properties":{}}}}]`},
		{"default is openai", "", `[{"type":"function","function":{"name":"read","description":"Read a file from the workspace, with line ranges.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},{"type":"function","function":{"name":"write","description":"Create or replace a whole file.","parameters":{"type":"object","properties":{}}}}]`},
		{"anthropic", FormatAnthropic, `[{"name":"read","description":"Read a file from the workspace, with line ranges.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},{"name":"write","description":"Create or replace a whole file.","input_schema":{"type":"object","properties":{}}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Render(testTools(), config.Guidance{}, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(d.Tools)
			if string(b) != tc.want {
				t.Fatalf("tools=%s\nwant %s", b, tc.want)
			}
			if d.Format == "" {
				t.Fatalf("format is empty")
			}
		})
	}
}

func TestRenderEmptyIsArray(t *testing.T) {
	for _, f := range []Format{FormatOpenAI, FormatAnthropic} {
		d, err := Render(nil, config.Guidance{}, f)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(d)
		if !strings.Contains(string(b), `"tools":[]`) {
			t.Fatalf("%s: %s, want an empty tools array", f, b)
		}
	}
}

func TestRenderUnknownFormat(t *testing.T) {
	if _, err := Render(testTools(), config.Guidance{}, "gemini"); err == nil || !strings.Contains(err.Error(), `"gemini"`) {
		t.Fatalf("err=%v, want one naming the format", err)
	}
}

func descriptions(t *testing.T, d Definitions) []string {
	t.Helper()
	var out []string
	for _, x := range d.Tools.([]anthropicTool) {
		out = append(out, x.Description)
	}
	return out
}

func TestRenderPlacement(t *testing.T) {
	const readGuide = "Guidelines:\n- Read before you edit.\n- Prefer ranges for big files.\n\nExample:\n{\"path\": \"main.go\"}"
	const writeGuide = "Guidelines:\n- Only for new files or deliberate rewrites."
	long := []string{"Read a file from the workspace, with line ranges.", "Create or replace a whole file."}
	for _, tc := range []struct {
		name       string
		g          config.Guidance
		wantSystem string
		wantDescs  []string
	}{
		{
			name:       "system by default",
			g:          config.Guidance{},
			wantSystem: "# Tool guidelines\n\n## read\n\n" + readGuide + "\n\n## write\n\n" + writeGuide,
			wantDescs:  long,
		},
		{
			name:       "system, no snippets",
			g:          config.Guidance{Placement: config.PlacementSystem, Snippets: bptr(false)},
			wantSystem: "# Tool guidelines\n\n## read\n\nGuidelines:\n- Read before you edit.\n- Prefer ranges for big files.\n\n## write\n\n" + writeGuide,
			wantDescs:  long,
		},
		{
			name:       "system, no guidelines",
			g:          config.Guidance{Guidelines: bptr(false)},
			wantSystem: "# Tool guidelines\n\n## read\n\nExample:\n{\"path\": \"main.go\"}",
			wantDescs:  long,
		},
		{
			name:      "nothing at all",
			g:         config.Guidance{Guidelines: bptr(false), Snippets: bptr(false)},
			wantDescs: long,
		},
		{
			name:      "description",
			g:         config.Guidance{Placement: config.PlacementDescription},
			wantDescs: []string{long[0] + "\n\n" + readGuide, long[1] + "\n\n" + writeGuide},
		},
		{
			name:      "description over budget uses short descriptions",
			g:         config.Guidance{Placement: config.PlacementDescription, Budget: 100},
			wantDescs: []string{"Read a file.\n\n" + readGuide, long[1] + "\n\n" + writeGuide},
		},
		{
			name:       "system over budget counts the system text",
			g:          config.Guidance{Budget: len(long[0]) + len(long[1]) + 10},
			wantSystem: "# Tool guidelines\n\n## read\n\n" + readGuide + "\n\n## write\n\n" + writeGuide,
			wantDescs:  []string{"Read a file.", long[1]},
		},
		{
			name:      "within budget keeps descriptions",
			g:         config.Guidance{Guidelines: bptr(false), Snippets: bptr(false), Budget: len(long[0]) + len(long[1])},
			wantDescs: long,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Render(testTools(), tc.g, FormatAnthropic)
			if err != nil {
				t.Fatal(err)
			}
			if d.System != tc.wantSystem {
				t.Errorf("system=%q\nwant   %q", d.System, tc.wantSystem)
			}
			got := descriptions(t, d)
			for i := range tc.wantDescs {
				if got[i] != tc.wantDescs[i] {
					t.Errorf("description[%d]=%q\nwant             %q", i, got[i], tc.wantDescs[i])
				}
			}
		})
	}
}

// TestRenderPure: the same input gives the same bytes.
func TestRenderPure(t *testing.T) {
	g := config.Guidance{Placement: config.PlacementDescription, Budget: 50}
	a, _ := Render(testTools(), g, FormatOpenAI)
	b, _ := Render(testTools(), g, FormatOpenAI)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("two renders differ:\n%s\n%s", ja, jb)
	}
}

func TestRenderResponsesAndStrict(t *testing.T) {
	tools := testTools()
	tools = append(tools, &tool.Tool{Name: "env", Description: "Set variables.", Guidelines: []string{"g"},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"vars":{"type":"object","additionalProperties":{"type":"string"}}},"required":["vars"]}`)})
	for _, tc := range []struct {
		name   string
		format Format
		strict bool
		want   string
	}{
		{"responses", FormatOpenAIResponses, false, `[{"type":"function","name":"read","description":"Read a file from the workspace, with line ranges.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"strict":false},{"type":"function","name":"write","description":"Create or replace a whole file.","parameters":{"type":"object","properties":{}},"strict":false},{"type":"function","name":"env","description":"Set variables.","parameters":{"type":"object","properties":{"vars":{"type":"object","additionalProperties":{"type":"string"}}},"required":["vars"]},"strict":false}]`},
		{"responses strict", FormatOpenAIResponses, true, `[{"type":"function","name":"read","description":"Read a file from the workspace, with line ranges.","parameters":{"additionalProperties":false,"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"},"strict":true},{"type":"function","name":"write","description":"Create or replace a whole file.","parameters":{"additionalProperties":false,"properties":{},"required":[],"type":"object"},"strict":true},{"type":"function","name":"env","description":"Set variables.","parameters":{"type":"object","properties":{"vars":{"type":"object","additionalProperties":{"type":"string"}}},"required":["vars"]},"strict":false}]`},
		{"chat strict", FormatOpenAI, true, `[{"type":"function","function":{"name":"read","description":"Read a file from the workspace, with line ranges.","parameters":{"additionalProperties":false,"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"},"strict":true}},{"type":"function","function":{"name":"write","description":"Create or replace a whole file.","parameters":{"additionalProperties":false,"properties":{},"required":[],"type":"object"},"strict":true}},{"type":"function","function":{"name":"env","description":"Set variables.","parameters":{"type":"object","properties":{"vars":{"type":"object","additionalProperties":{"type":"string"}}},"required":["vars"]},"strict":false}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Render(tools, config.Guidance{}, tc.format, WithStrict(tc.strict))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(d.Tools)
			if string(b) != tc.want {
				t.Fatalf("tools=%s\nwant %s", b, tc.want)
			}
			if d.Strict != tc.strict {
				t.Fatalf("Strict=%v", d.Strict)
			}
			if tc.strict {
				if len(d.NotStrict) != 1 || d.NotStrict[0].Tool != "env" || !strings.Contains(d.NotStrict[0].Reason, "arguments.vars takes fields beyond its listed properties") {
					t.Fatalf("NotStrict=%+v, want env with the reason", d.NotStrict)
				}
			} else if d.NotStrict != nil {
				t.Fatalf("NotStrict=%+v without strict", d.NotStrict)
			}
		})
	}
	// The Chat Completions answer without strict is what it always was.
	d, _ := Render(tools[:2], config.Guidance{}, FormatOpenAI)
	if b, _ := json.Marshal(d); strings.Contains(string(b), "strict") {
		t.Fatalf("non-strict openai answer mentions strict: %s", b)
	}
	if _, err := Render(tools, config.Guidance{}, FormatAnthropic, WithStrict(true)); err == nil || !strings.Contains(err.Error(), "openai_responses") {
		t.Fatalf("anthropic strict: err=%v, want one pointing at the OpenAI formats", err)
	}
	if f, err := ParseFormat("openai_responses"); err != nil || f != FormatOpenAIResponses {
		t.Fatalf("ParseFormat(openai_responses)=%q, %v", f, err)
	}
}
