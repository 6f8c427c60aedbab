package tool

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

// TestSchemaIntegersByValue: JSON Schema counts a number with a zero
// fractional part as an integer (2.0, 1e2, 1.50e1), and nothing else (2.5,
// 1e-2, "2"). Validation stays strict about everything else.
func TestSchemaIntegersByValue(t *testing.T) {
	validate, err := CompileSchema(json.RawMessage(`{"type": "object", "properties": {
		"n": {"type": "integer", "minimum": 0, "maximum": 2000},
		"ns": {"type": "array", "items": {"type": "integer"}},
		"pick": {"type": "integer", "enum": [1, 2]},
		"x": {"type": "number"}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{
		`{"n": 2}`, `{"n": 2.0}`, `{"n": 2.000}`, `{"n": 1e2}`, `{"n": 1E+2}`, `{"n": 1.50e1}`, `{"n": 0.0}`, `{"n": -0.0}`,
		`{"n": 2000.0}`, `{"n": 200e-1}`, `{"ns": [1.0, 2e0, 3]}`, `{"pick": 2.0}`, `{"x": 2.5}`, `{"x": 2.0}`,
	} {
		if err := validate(json.RawMessage(ok)); err != nil {
			t.Errorf("%s: err=%v, want valid", ok, err)
		}
	}
	for _, c := range []struct{ args, want string }{
		{`{"n": 2.5}`, "arguments.n: want integer, got number 2.5"},
		{`{"n": 1e-2}`, "arguments.n: want integer, got number 1e-2"},
		{`{"n": 2.0000000001}`, "arguments.n: want integer, got number 2.0000000001"},
		{`{"n": "2"}`, `arguments.n: want integer, got string "2"`},
		{`{"n": "2.0"}`, `arguments.n: want integer, got string "2.0"`},
		{`{"n": true}`, "arguments.n: want integer, got boolean true"},
		{`{"n": 2000.5}`, "arguments.n: want integer, got number 2000.5"},
		{`{"n": 2001.0}`, "arguments.n: want at most 2000, got 2001.0"},
		{`{"n": 1e400}`, "arguments.n: want at most 2000, got 1e400"},
		{`{"ns": [1.0, 1.5]}`, "arguments.ns[1]: want integer, got number 1.5"},
		{`{"pick": 3.0}`, "arguments.pick: want one of 1, 2, got integer 3.0"},
	} {
		err := validate(json.RawMessage(c.args))
		if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err=%v, want %q", c.args, err, c.want)
		}
	}
}

type countArgs struct {
	N     int            `json:"n"`
	Small int8           `json:"small,omitempty"`
	U     uint16         `json:"u,omitempty"`
	Big   int64          `json:"big,omitempty"`
	Ratio float64        `json:"ratio,omitempty"`
	List  []int          `json:"list,omitempty"`
	ByKey map[string]int `json:"by_key,omitempty"`
	Inner *struct {
		Depth uint `json:"depth"`
	} `json:"inner,omitempty"`
	Level int `json:"level,omitempty" enum:"1,2,3"`
	Raw   any `json:"raw,omitempty"`
}

// TestTypedIntegersByValue: a Go tool whose field is an integer receives 2
// for 2.0, in every place an integer can sit; a value its type cannot hold
// is still refused, and a fraction never reaches it.
func TestTypedIntegersByValue(t *testing.T) {
	var got countArgs
	calls := 0
	tl, err := New("count", "Count.", func(ctx context.Context, a countArgs) (Result, error) {
		calls++
		got = a
		return Text("ok"), nil
	}, WithGuidelines("Use in tests."))
	if err != nil {
		t.Fatal(err)
	}
	args := `{"n": 2.0, "small": -1.28e2, "u": 65535.0, "big": 9.223372036854775807e18, "ratio": 2.0,
		"list": [1.0, 2e0, 30e-1], "by_key": {"a": 4.00}, "inner": {"depth": 7.0}, "level": 3.0, "raw": 5.0}`
	if err := tl.Validate(json.RawMessage(args)); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := tl.Run(context.Background(), json.RawMessage(args)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := countArgs{N: 2, Small: -128, U: 65535, Big: 9223372036854775807, Ratio: 2, List: []int{1, 2, 3},
		ByKey: map[string]int{"a": 4}, Level: 3, Raw: float64(5)}
	want.Inner = &struct {
		Depth uint `json:"depth"`
	}{Depth: 7}
	if calls != 1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("fn got %+v (calls %d), want %+v", got, calls, want)
	}
	for _, c := range []struct{ args, want string }{
		{`{"n": 2.5}`, "arguments.n: want integer, got number 2.5"},
		{`{"n": "2"}`, `arguments.n: want integer, got string "2"`},
		{`{"n": 1, "small": 128.0}`, "arguments.small: want at most 127, got 128.0"},
		{`{"n": 1, "u": -1.0}`, "arguments.u: want at least 0, got -1.0"},
		{`{"n": 1, "big": 1e19}`, "arguments.big: want a value that fits int64"},
		{`{"n": 1e30}`, "arguments.n: want a value that fits int"},
		{`{"n": 1, "level": 4.0}`, "arguments.level: want one of 1, 2, 3, got integer 4.0"},
	} {
		before := calls
		err := tl.Validate(json.RawMessage(c.args))
		if !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err=%v, want %q", c.args, err, c.want)
		}
		if _, err := tl.Run(context.Background(), json.RawMessage(c.args)); err == nil || calls != before {
			t.Errorf("%s: Run called fn with arguments Validate refused", c.args)
		}
	}
}

func TestIntegerLiteral(t *testing.T) {
	for _, c := range []struct {
		in       string
		integral bool
		lit      string // "" when not rewritten
	}{
		{"0", true, "0"}, {"-0", true, "-0"}, {"0.0", true, "0"}, {"-0.0e5", true, "-0"},
		{"2", true, "2"}, {"2.0", true, "2"}, {"-2.50e1", true, "-25"}, {"1e2", true, "100"}, {"1E+2", true, "100"},
		{"100e-2", true, "1"}, {"0.5e1", true, "5"}, {"00.1e1", true, "1"},
		{"18446744073709551615.0", true, "18446744073709551615"},
		{"1e19", true, "10000000000000000000"}, {"1e20", true, ""}, {"123456789012345678901", true, ""},
		{"1e400", true, ""}, {"1e99999999999999999999", true, ""},
		{"2.5", false, ""}, {"1e-2", false, ""}, {"-0.1", false, ""}, {"10e-2", false, ""},
		{"1e-99999999999999999999", false, ""}, {"0e-99999999999999999999", true, "0"},
	} {
		lit, integral := integerLiteral(c.in)
		if integral != c.integral || lit != c.lit {
			t.Errorf("integerLiteral(%q) = %q, %v; want %q, %v", c.in, lit, integral, c.lit, c.integral)
		}
	}
}

// FuzzIntegerLiteral checks integerLiteral against math/big on every valid
// JSON number: integral exactly when the value has no fraction, and a
// rewritten literal is a plain integer of the same value.
func FuzzIntegerLiteral(f *testing.F) {
	for _, s := range []string{"0", "-0", "2.0", "2.5", "1e2", "1E-2", "-12.340e3", "0.000e-7", "18446744073709551616.0", "9e999", "1e-999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n json.Number
		if json.Unmarshal([]byte(s), &n) != nil || string(n) != s {
			return // not exactly one JSON number
		}
		lit, integral := integerLiteral(s)
		if exp := strings.IndexAny(s, "eE"); exp >= 0 && len(s)-exp > 5 {
			// An exponent of four digits or more: math/big would work hard;
			// check only the rewritten form.
			if lit != "" && len(lit) > 21 {
				t.Fatalf("integerLiteral(%q) rewrote to %d bytes", s, len(lit))
			}
			return
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat refused %q", s)
		}
		if integral != r.IsInt() {
			t.Fatalf("integerLiteral(%q) integral=%v, big.Rat says %v", s, integral, r.IsInt())
		}
		if lit == "" {
			if integral && len(strings.TrimPrefix(r.Num().String(), "-")) <= maxIntegerDigits {
				t.Fatalf("integerLiteral(%q) did not rewrite %s", s, r.Num())
			}
			return
		}
		if strings.ContainsAny(lit, ".eE+") || len(lit) > 21 {
			t.Fatalf("integerLiteral(%q) = %q, want a plain integer", s, lit)
		}
		lr, ok := new(big.Rat).SetString(lit)
		if !ok || lr.Cmp(r) != 0 {
			t.Fatalf("integerLiteral(%q) = %q, another value", s, lit)
		}
		var back json.Number
		if json.Unmarshal([]byte(lit), &back) != nil {
			t.Fatalf("integerLiteral(%q) = %q, not JSON", s, lit)
		}
		if !sameNumber(json.Number(s), back) {
			t.Fatalf("sameNumber(%q, %q) is false", s, lit)
		}
	})
}
