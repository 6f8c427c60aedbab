package events_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// chainScript is the hash chain recomputed in Python (docs/audit.md).
var chainScript = filepath.Join("..", "scripts", "verify-chain.py")

// python returns the interpreter scripts/ensure-python provides.
func python(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CALLSHEET_PYTHON"); p != "" {
		return p
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not on PATH: run scripts/ensure-python (the hash chain's cross-language check needs it)")
	}
	return p
}

// pythonCanonical runs the script's --canonical mode over inputs, one per
// line, and returns its answer for each: the canonical bytes, or nil and the
// error text.
func pythonCanonical(t *testing.T, inputs [][]byte) ([][]byte, []string) {
	t.Helper()
	var in bytes.Buffer
	for _, b := range inputs {
		if bytes.ContainsAny(b, "\n") {
			t.Fatalf("input %q holds a newline: one per line", b)
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command(python(t), chainScript, "--canonical")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --canonical: %v\n%s", chainScript, err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%d answers for %d inputs:\n%s", len(lines), len(inputs), out)
	}
	got, errs := make([][]byte, len(lines)), make([]string, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "error: ") {
			errs[i] = l
			continue
		}
		if got[i], err = hex.DecodeString(l); err != nil {
			t.Fatalf("answer %d: %q is not hex", i, l)
		}
	}
	return got, errs
}

// TestCanonicalInPython checks that the Python script canonicalizes every
// input exactly as events.Canonical does, byte for byte: the RFC 8785
// vectors, the edge cases of the encoding's own rules (numbers beyond a
// double, text that is not Unicode, repeated names, UTF-16 order), and
// thousands of random JSON texts.
func TestCanonicalInPython(t *testing.T) {
	var inputs [][]byte
	ins, _ := filepath.Glob("testdata/jcs/*.in.json")
	for _, in := range ins {
		b, _ := os.ReadFile(in)
		var v any
		_ = json.Unmarshal(b, &v)
		// One line each: compacted, escapes kept as they are.
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, c.Bytes())
	}
	for _, s := range []string{
		`0`, `-0`, `-0.0e7`, `4.50`, `1E30`, `1e21`, `1e20`, `2e-3`, `0.000001`, `1e-7`, `0.0000001`, `123456789012345678901`,
		`1234567890123456789012`, `9007199254740993`, `12345678901234567890`, `333333333.33333329`, `1e400`, `-1e-400`,
		`1e1000000000000000000000`, `123e-1000000000000000000002`, `0.1000000000000000055511151231257827`, `5e-324`,
		`"\u0041\/\b\f\n\r\t\u0001\u001f\u007f\"\\"`, `"\u003c/script\u003e \u0026 \u2028"`,
		`"\ud83d\ude02"`, `"\ud83dA"`, `"\ude02"`, `"\ud83d\ud83d\ude02"`, `"\ud83d\n"`, `"\ud83d"`,
		"\"a\xffb\xe2\x82c\"", "\"\xed\xa0\x80\"", "\"\xc0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xef\xbf\xbd\"",
		"{\"\xff\":1,\"\xfe\":2}", "\"\\ud83d\xf0\x9f\x98\x82\"",
		`{"b":1,"a":2,"c":{"z":[],"y":{}}}`, "{\"\uff61\":1,\"\U0001F602\":2,\"\u00e9\":3,\"\ue000\":4}",
		`{"\u0062":1,"a":2}`, `{"b":1,"a":2,"b":3,"a":4}`, ` { "a" : [ 1 , true , null , false ] } `,
		`{"":{"":[[],{}]}}`, `[1,[2,[3,[4]]]]`,
		`{`, `[1,]`, `01`, `NaN`, `Infinity`, `"\x"`, `"a` + "\t" + `b"`, `tru`,
	} {
		inputs = append(inputs, []byte(s))
	}
	r := rand.New(rand.NewPCG(11, 8785))
	for range 3000 {
		inputs = append(inputs, randomJSON(r, 0))
	}
	got, errs := pythonCanonical(t, inputs)
	for i, in := range inputs {
		want, err := events.Canonical(in)
		switch {
		case err != nil && errs[i] == "":
			t.Errorf("input %q: Go refuses it (%v), Python gives %q", in, err, got[i])
		case err == nil && errs[i] != "":
			t.Errorf("input %q: Go gives %q, Python refuses it (%s)", in, want, errs[i])
		case err == nil && !bytes.Equal(got[i], want):
			t.Errorf("input %q:\n    Go %q\nPython %q", in, want, got[i])
		}
	}
}

// randomJSON makes a JSON text with the shapes events hold and the edges of
// the encoding: long and exact numbers, escapes, non-ASCII and invalid
// text, repeated and unsorted names.
func randomJSON(r *rand.Rand, depth int) []byte {
	var b bytes.Buffer
	var value func(d int)
	str := func() {
		b.WriteByte('"')
		for range r.IntN(6) {
			switch r.IntN(12) {
			case 0:
				fmt.Fprintf(&b, `\u%04x`, r.IntN(0x10000))
			case 1:
				b.WriteString([]string{`\n`, `\"`, `\\`, `\/`, `\t`, `\b`}[r.IntN(6)])
			case 2:
				b.WriteString([]string{"é", "😂", "\uff61", "\ue000", "\u2028"}[r.IntN(5)])
			case 3:
				b.WriteByte(byte(0x80 + r.IntN(0x80))) // not UTF-8
			case 4:
				b.WriteString(`\ud83d`)
			default:
				b.WriteByte(byte('a' + r.IntN(4)))
			}
		}
		b.WriteByte('"')
	}
	value = func(d int) {
		k := r.IntN(8)
		if d > 3 {
			k = r.IntN(4)
		}
		switch k {
		case 0:
			str()
		case 1:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		case 2:
			if r.IntN(2) == 0 {
				b.WriteByte('-')
			}
			fmt.Fprintf(&b, "%d", r.Int64())
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, ".%d", r.Uint64())
			}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, "e%d", r.IntN(80)-40)
			}
		case 3:
			s, _ := json.Marshal(r.NormFloat64() * float64(r.IntN(1e9)))
			b.Write(s)
		case 4, 5:
			b.WriteByte('{')
			for i := range r.IntN(5) {
				if i > 0 {
					b.WriteByte(',')
				}
				str()
				b.WriteByte(':')
				value(d + 1)
			}
			b.WriteByte('}')
		default:
			b.WriteByte('[')
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteByte(',')
				}
				value(d + 1)
			}
			b.WriteByte(']')
		}
	}
	value(depth)
	return b.Bytes()
}

// TestHashInPython checks that the script recomputes the hash of events
// exactly under both rules, links and all: a chain the script accepts, and
// a changed event it names. The events hold what standard RFC 8785
// libraries cannot read alike (an integer a double cannot hold, a lone
// surrogate, bytes that are not UTF-8, escapes of HTML characters).
func TestHashInPython(t *testing.T) {
	for _, chain := range []events.Chain{events.Chain2, events.Chain1} {
		t.Run(string(chain), func(t *testing.T) {
			var evs []events.Event
			for i, data := range []string{
				`{"workspace":"w"}`,
				`{"turn":"t1","calls":[{"id":"c1","name":"write","arguments":{"id":12345678901234567891,"text":"\u003cb\u003e","n":1.50}}],"parallel_tool_calls":true,"cap":8,"plan":[]}`,
				"{\"turn\":\"t1\",\"call\":\"c1\",\"index\":0,\"attempt\":1,\"content\":[{\"type\":\"text\",\"text\":\"caf\xc3\xa9 \xff \\ud83d\"}],\"truncated\":false}",
			} {
				ev := events.Event{ID: fmt.Sprintf("01J%023d", i), Tenant: "acme", Session: "01JSESSION000000000000000S", Seq: uint64(i + 1),
					Time: time.Date(2026, 12, 1, 9, 0, i, 100*i, time.UTC), Type: events.TypeSessionOpened, Data: json.RawMessage(data)}
				if i > 0 {
					ev.Causation = evs[0].ID
					ev.Type = events.TypeTurnReceived
				}
				evs = append(evs, ev)
			}
			if err := chain.Link(evs); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			write := func(evs []events.Event) string {
				var b bytes.Buffer
				for _, ev := range evs {
					line, err := events.Marshal(ev)
					if err != nil {
						t.Fatal(err)
					}
					b.Write(line)
					b.WriteByte('\n')
				}
				p := filepath.Join(dir, fmt.Sprintf("export-%d.ndjson", time.Now().UnixNano()))
				if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			out, err := exec.Command(python(t), chainScript, write(evs)).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "chain rule "+string(chain)) {
				t.Fatalf("the script refuses a sound chain: %v\n%s", err, out)
			}
			for _, ev := range evs {
				h, _ := chain.Hash(ev)
				if !strings.Contains(string(out), fmt.Sprintf("seq %d %s %s", ev.Seq, ev.Type, h)) {
					t.Fatalf("the script's hash of seq %d is not Go's %s:\n%s", ev.Seq, h, out)
				}
			}
			// One digit of a number a double cannot hold, changed.
			evs[1].Data = json.RawMessage(strings.Replace(string(evs[1].Data), "12345678901234567891", "12345678901234567892", 1))
			out, err = exec.Command(python(t), chainScript, write(evs)).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "seq 3: the chain breaks here") {
				t.Fatalf("the script missed a changed event: %v\n%s", err, out)
			}
		})
	}
}
