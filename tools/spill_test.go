package tools

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/callsheet/callsheet/tool"
)

func readOutput(t *testing.T, o tool.Output) []byte {
	t.Helper()
	r, err := o.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func spillFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestSpillKeepsHeadInMemoryAndTheRestOnDisk: a small output stays in
// memory; a large one goes to a file whose Output is the whole, with the
// trailer; past the limit bytes are counted, dropped and noted; Close
// removes the file.
func TestSpillKeepsHeadInMemoryAndTheRestOnDisk(t *testing.T) {
	dir := t.TempDir()
	small := newSpill(dir, 0)
	_, _ = small.Write([]byte("hello\n"))
	if small.Spilled() || spillFiles(t, dir) != 0 || string(small.Head()) != "hello\n" {
		t.Fatalf("a 6-byte output spilled (%v) or lost its head %q", small.Spilled(), small.Head())
	}

	line := []byte("0123456789abcdefghijklmnopqrstuvwxyz\n") // 37 bytes
	big := newSpill(dir, 0)
	var want bytes.Buffer
	for want.Len() < 3*tool.MinShown {
		_, _ = big.Write(line)
		want.Write(line)
	}
	if !big.Spilled() || spillFiles(t, dir) != 1 {
		t.Fatalf("a %d-byte output did not spill to a file", want.Len())
	}
	if h := big.Head(); len(h) != tool.MinShown || !bytes.Equal(h, want.Bytes()[:tool.MinShown]) {
		t.Fatalf("head is %d bytes, want the first %d", len(h), tool.MinShown)
	}
	if tail := big.Tail(); !bytes.HasSuffix(want.Bytes(), tail) || len(tail) != tailBytes {
		t.Fatalf("tail is %d bytes and not the output's end", len(tail))
	}
	out := big.Output("exit code 0")
	want.WriteString("exit code 0")
	if got := readOutput(t, out); !bytes.Equal(got, want.Bytes()) || out.Size() != int64(want.Len()) {
		t.Fatalf("Output is %d bytes (Size %d), want the %d written plus the trailer", len(got), out.Size(), want.Len())
	}
	if out.Lines() != strings.Count(want.String(), "\n")+1 {
		t.Fatalf("Lines = %d, want %d", out.Lines(), strings.Count(want.String(), "\n")+1)
	}
	// Output is readable twice; Close removes the file; Discard after
	// Output leaves it alone.
	big.Discard()
	if !bytes.Equal(readOutput(t, out), want.Bytes()) {
		t.Fatal("a second read differs")
	}
	if err := out.Close(); err != nil || spillFiles(t, dir) != 0 {
		t.Fatalf("Close: %v, %d files left", err, spillFiles(t, dir))
	}
	if _, err := out.Open(); err == nil {
		t.Fatal("Open after Close succeeded")
	}

	capped := newSpill(dir, 1000)
	for range 100 {
		_, _ = capped.Write(line) // 3,700 bytes
	}
	o := capped.Output("exit code 3")
	got := string(readOutput(t, o))
	if !strings.HasPrefix(got, strings.Repeat(string(line), 27)) || !strings.Contains(got, "output cut at 1000 bytes, the limit limits.output_bytes_per_call: 2700 more bytes were discarded") ||
		!strings.HasSuffix(got, "]\nexit code 3") {
		t.Fatalf("a capped output reads %q", got)
	}
	_ = o.Close()
}

// TestSpillConcurrentWriters: stdout and stderr may share a spill.
func TestSpillConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	s := newSpill(dir, 0)
	var wg sync.WaitGroup
	chunk := bytes.Repeat([]byte("x"), 4096)
	for range 4 {
		wg.Go(func() {
			for range 200 {
				_, _ = s.Write(chunk)
			}
		})
	}
	wg.Wait()
	o := s.Output("")
	defer o.Close()
	if got := readOutput(t, o); len(got) != 4*200*4096 || bytes.Count(got, []byte("x")) != len(got) {
		t.Fatalf("read %d bytes, want %d x's", len(got), 4*200*4096)
	}
}

// TestSpillFileFailure: a spill directory that cannot take the file drops
// the rest, and the note says why.
func TestSpillFileFailure(t *testing.T) {
	s := newSpill("/proc/nonexistent-dir", 0)
	_, _ = s.Write(bytes.Repeat([]byte("y"), tool.MinShown+10))
	o := s.Output("")
	defer o.Close()
	got := string(readOutput(t, o))
	if !strings.HasPrefix(got, strings.Repeat("y", tool.MinShown)) || !strings.Contains(got, "output cut at 262144 bytes: the spill file failed") || !strings.Contains(got, "10 more bytes were discarded") {
		t.Fatalf("output after a failed spill reads ...%q", got[max(len(got)-300, 0):])
	}
}

// TestShellLargeOutputIsSpilled: a shell command's output beyond what a
// result shows comes back as the start of it plus a Full holding the whole
// (up to the call's MaxOutput) with the exit code; nothing is left in the
// spill directory once the runtime closes it.
func TestShellLargeOutputIsSpilled(t *testing.T) {
	e := newEnv(t)
	spill := t.TempDir()
	c, _ := tool.CallFrom(e.ctx)
	c.SpillDir, c.MaxOutput = spill, 2<<20
	ctx := tool.WithCall(e.ctx, c)
	sh := builtin(t, "shell")

	r, err := call(t, ctx, sh, `{"command": "seq 1 10"}`)
	if err != nil || r.Full != nil {
		t.Fatalf("small output: err=%v full=%v", err, r.Full)
	}
	r, err = call(t, ctx, sh, `{"command": "seq 1 1000000; exit 4"}`) // 6.9 MB
	if err != nil || r.Full == nil {
		t.Fatalf("large output: err=%v full=%v", err, r.Full)
	}
	if head := text(t, r); len(head) < tool.MinShown || !strings.HasPrefix(head, "1\n2\n3\n") {
		t.Fatalf("the result shows %d bytes starting %.20q", len(head), head)
	}
	got := string(readOutput(t, r.Full))
	if r.Full.Size() != int64(len(got)) || !strings.HasPrefix(got, "1\n2\n") || !strings.Contains(got, "output cut at 2097152 bytes, the limit limits.output_bytes_per_call") || !strings.HasSuffix(got, "\nexit code 4") {
		t.Fatalf("the full output is %d bytes (Size %d) ending %q", len(got), r.Full.Size(), got[max(len(got)-200, 0):])
	}
	if spillFiles(t, spill) != 1 {
		t.Fatalf("%d spill files while the result is held, want 1", spillFiles(t, spill))
	}
	_ = r.Full.Close()
	if n := spillFiles(t, spill); n != 0 {
		t.Fatalf("%d spill files left after Close", n)
	}
	// A timed-out command leaves no spill file either.
	if _, err := call(t, ctx, sh, `{"command": "seq 1 1000000; sleep 30", "timeout_ms": 500}`); !errors.Is(err, ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if n := spillFiles(t, spill); n != 0 {
		t.Fatalf("%d spill files left after a timeout", n)
	}
}
