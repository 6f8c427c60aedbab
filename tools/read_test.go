package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%6d\tline %d\n", i, i)
	}
	return b.String()
}

func TestReadRanges(t *testing.T) {
	e := newEnv(t)
	var body strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&body, "line %d\n", i)
	}
	e.file(t, "ten.txt", body.String())
	e.file(t, "nonl.txt", "first\nlast without newline")
	e.file(t, "empty.txt", "")
	read := builtin(t, "read")

	tests := []struct {
		name    string
		args    string
		want    string
		wantErr string
	}{
		{name: "whole file", args: `{"path": "ten.txt"}`, want: numbered(1, 10)},
		{name: "range", args: `{"path": "ten.txt", "offset": 3, "limit": 2}`, want: numbered(3, 4) + "(more lines follow; continue with offset 5)\n"},
		{name: "offset to end", args: `{"path": "ten.txt", "offset": 9}`, want: numbered(9, 10)},
		{name: "limit only", args: `{"path": "ten.txt", "limit": 10}`, want: numbered(1, 10)},
		{name: "absolute inside", args: fmt.Sprintf(`{"path": %q, "offset": 10}`, filepath.Join(e.root, "ten.txt")), want: numbered(10, 10)},
		{name: "no final newline", args: `{"path": "nonl.txt"}`, want: "     1\tfirst\n     2\tlast without newline\n"},
		{name: "empty file", args: `{"path": "empty.txt"}`, want: "(empty.txt is empty)"},
		{name: "offset past end", args: `{"path": "ten.txt", "offset": 11}`, wantErr: "offset 11 is past the end of the file, which has 10 lines"},
		{name: "missing", args: `{"path": "nope.txt"}`, wantErr: "read nope.txt: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := call(t, e.ctx, read, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err=%v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err=%v", err)
			}
			if got := text(t, r); got != tt.want {
				t.Errorf("text=\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestReadLongLineIsCut(t *testing.T) {
	e := newEnv(t)
	e.file(t, "long.txt", strings.Repeat("x", maxLineBytes+100)+"\nnext\n")
	r, err := call(t, e.ctx, builtin(t, "read"), `{"path": "long.txt"}`)
	if err != nil {
		t.Fatal(err)
	}
	got := text(t, r)
	mustContain(t, got, "[line cut: 100 more bytes]", "     2\tnext\n")
}

func TestReadDirectory(t *testing.T) {
	e := newEnv(t)
	e.file(t, "b.txt", "")
	e.file(t, "a.txt", "")
	e.file(t, "zdir/x", "")
	e.file(t, "cdir/y", "")
	read := builtin(t, "read")
	r, err := call(t, e.ctx, read, `{"path": "."}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "a.txt\nb.txt\ncdir/\nzdir/\n"; got != want {
		t.Errorf("listing=%q, want %q", got, want)
	}
	r, err = call(t, e.ctx, read, `{"path": ".", "offset": 2, "limit": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), "b.txt\ncdir/\n(4 entries in all; continue with offset 4)\n"; got != want {
		t.Errorf("listing=%q, want %q", got, want)
	}
}

func TestReadBinaryRefused(t *testing.T) {
	e := newEnv(t)
	e.file(t, "nul.bin", "ELF\x00\x01\x02text")
	e.file(t, "noise.bin", string(bytes.Repeat([]byte{0xff, 0xfe, 0x80, 'a'}, 100)))
	e.file(t, "latin1.txt", "caf\xe9 au lait, cr\xe8me br\xfbl\xe9e, and plenty of plain ASCII around it\n")
	read := builtin(t, "read")
	for _, p := range []string{"nul.bin", "noise.bin"} {
		_, err := call(t, e.ctx, read, fmt.Sprintf(`{"path": %q}`, p))
		if err == nil || !strings.Contains(err.Error(), "binary file") {
			t.Errorf("read %s: err=%v, want a binary-file refusal", p, err)
		}
	}
	r, err := call(t, e.ctx, read, `{"path": "latin1.txt"}`)
	if err != nil {
		t.Fatalf("read latin1.txt: %v, want it read as text", err)
	}
	mustContain(t, text(t, r), "caf\uFFFD au lait")
}

func TestReadImage(t *testing.T) {
	e := newEnv(t)
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	// A misleading extension: the type comes from the content.
	e.file(t, "pic.dat", buf.String())
	r, err := call(t, e.ctx, builtin(t, "read"), `{"path": "pic.dat"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Parts) != 2 || r.Parts[1].Type != tool.PartImage {
		t.Fatalf("parts=%+v, want a text part then an image part", r.Parts)
	}
	if got := r.Parts[1].MIME; got != "image/png" {
		t.Errorf("mime=%q, want image/png", got)
	}
	if !bytes.Equal(r.Parts[1].Data, buf.Bytes()) {
		t.Errorf("image data differs from the file (%d bytes, want %d)", len(r.Parts[1].Data), buf.Len())
	}
	if _, err := json.Marshal(r.Parts); err != nil {
		t.Errorf("image result does not marshal: %v", err)
	}

	for _, tt := range []struct{ head, mime string }{
		{"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"},
		{"GIF89a\x01\x00", "image/gif"},
		{"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"plain text", ""},
	} {
		if got := imageType([]byte(tt.head)); got != tt.mime {
			t.Errorf("imageType(%q)=%q, want %q", tt.head, got, tt.mime)
		}
	}
}

func TestReadSizeCap(t *testing.T) {
	e := newEnv(t)
	line := strings.Repeat("y", 99) + "\n"
	e.file(t, "big.txt", strings.Repeat(line, MaxReadBytes/len(line)+10))
	read := builtin(t, "read")
	_, err := call(t, e.ctx, read, `{"path": "big.txt"}`)
	if err == nil {
		t.Fatal("read of a file over MaxReadBytes succeeded, want a refusal")
	}
	mustContain(t, err.Error(), "over the", "offset and limit")
	r, err := call(t, e.ctx, read, `{"path": "big.txt", "offset": 100000, "limit": 2}`)
	if err != nil {
		t.Fatalf("ranged read of a large file: %v", err)
	}
	mustContain(t, text(t, r), "100000\ty", "100001\ty", "continue with offset 100002")
}

func TestReadConfined(t *testing.T) {
	e := newEnv(t)
	secret := filepath.Join(e.outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(e.root, "out-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.outside, filepath.Join(e.root, "out-dir")); err != nil {
		t.Fatal(err)
	}
	e.file(t, "real.txt", "inside\n")
	if err := os.Symlink("real.txt", filepath.Join(e.root, "in-link")); err != nil {
		t.Fatal(err)
	}
	read := builtin(t, "read")
	for _, p := range []string{"../outside/secret.txt", secret, "out-link", "out-dir/secret.txt", "out-dir"} {
		r, err := call(t, e.ctx, read, fmt.Sprintf(`{"path": %q}`, p))
		if !errors.Is(err, workspace.ErrOutside) {
			t.Errorf("read %s: result=%+v err=%v, want ErrOutside", p, r, err)
		}
	}
	r, err := call(t, e.ctx, read, `{"path": "in-link"}`)
	if err != nil {
		t.Fatalf("read in-link: %v", err)
	}
	if got := text(t, r); got != "     1\tinside\n" {
		t.Errorf("read in-link=%q", got)
	}
}

func TestReadDeclarations(t *testing.T) {
	read := builtin(t, "read")
	want := tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	if read.Declarations != want {
		t.Errorf("declarations=%+v, want %+v", read.Declarations, want)
	}
	for args, want := range map[string][]string{
		`{"path": "./a/../b.txt"}`:  {"b.txt"},
		`{"path": "/ws/x.txt"}`:     {"/ws/x.txt"},
		`{"path": "../x"}`:          nil,
		`{"path": 5}`:               nil,
		`{"path": "a", "other": 1}`: nil,
	} {
		if got := read.TouchedPaths(json.RawMessage(args)); !reflect.DeepEqual(got, want) {
			t.Errorf("TouchedPaths(%s)=%q, want %q", args, got, want)
		}
	}
	if err := read.Validate(json.RawMessage(`{"path": "a", "offset": 0}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("Validate(offset 0) err=%v, want ErrInvalidArguments", err)
	}
	if _, err := read.Run(t.Context(), json.RawMessage(`{"path": "a"}`)); !errors.Is(err, ErrNoWorkspace) {
		t.Errorf("Run without a workspace err=%v, want ErrNoWorkspace", err)
	}
}
