package tool

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNumbersExact: numbers are compared as the decimals they are written
// as, with bounds as written, never through float64 (docs/spec.md §1).
func TestNumbersExact(t *testing.T) {
	validate, err := CompileSchema(json.RawMessage(`{"type": "object", "properties": {
		"temperature": {"type": "number", "minimum": 0, "maximum": 1},
		"m": {"type": "number", "minimum": 1.1},
		"e": {"exclusiveMaximum": 0.3},
		"neg": {"minimum": -0.3},
		"tiny": {"minimum": 1e-7},
		"big": {"type": "integer", "maximum": 9007199254740993},
		"step": {"multipleOf": 0.01},
		"huge": {"multipleOf": 7},
		"free": {"type": "object"}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		`{"temperature": 0.1}`, `{"temperature": 1}`, `{"temperature": 0}`, `{"m": 1.1}`, `{"m": 11e-1}`,
		`{"e": 0.29999999999999999999}`, `{"neg": -0.3}`, `{"tiny": 1e-7}`, `{"tiny": 0.0000001}`,
		`{"big": 9007199254740993}`, `{"step": 0.07}`, `{"step": 19.99}`, `{"step": 1e400}`,
		`{"huge": 7e99999999999999999999}`, `{"free": {"x": 1E400, "y": -1e-400}}`,
	} {
		if err := validate(json.RawMessage(args)); err != nil {
			t.Errorf("%s: %v, want accepted", args, err)
		}
	}
	for args, want := range map[string]string{
		`{"temperature": 1.0000000000000000001}`: "arguments.temperature: want at most 1, got 1.0000000000000000001",
		`{"m": 1.0999999999999999999}`:           "arguments.m: want at least 1.1, got 1.0999999999999999999",
		`{"e": 0.3}`:                             "arguments.e: want less than 0.3, got 0.3",
		`{"neg": -0.30000000000000001}`:          "arguments.neg: want at least -0.3, got -0.30000000000000001",
		`{"tiny": 9.9999999999999999e-8}`:        "arguments.tiny: want at least 1e-7, got 9.9999999999999999e-8",
		`{"big": 9007199254740994}`:              "arguments.big: want at most 9007199254740993, got 9007199254740994",
		`{"step": 0.075}`:                        "arguments.step: want a multiple of 0.01, got 0.075",
		`{"huge": 1e99999999999999999999}`:       "arguments.huge: want a multiple of 7, got 1e99999999999999999999",
	} {
		if err := validate(json.RawMessage(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
