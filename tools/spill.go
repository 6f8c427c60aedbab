package tools

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/callsheet/callsheet/tool"
)

// spill collects a process's output without holding it whole in memory
// (docs/architecture.md, "Bounded inboxes and queues"): the first
// tool.MinShown bytes stay in memory (what a result shows), and so do the
// last tailBytes (what an error quotes); once the output outgrows the head,
// everything kept goes to a spill file under dir. At most limit bytes are
// kept (the call's limits.output_bytes_per_call); the rest is read, counted
// and dropped, so the process never blocks on a full pipe. A spill is safe
// for concurrent writes, so standard output and error may share one.
type spill struct {
	dir   string
	limit int64

	mu      sync.Mutex
	head    []byte
	tail    []byte // the last tailBytes written, kept or not
	f       *os.File
	kept    int64 // bytes kept: in head, or in the file once there is one
	dropped int64 // bytes past limit, or lost to a spill file that failed
	lines   int   // newlines among the kept bytes
	last    byte  // the last kept byte
	err     error // why the spill file failed; later bytes are dropped
}

// newSpill returns a spill keeping up to limit bytes (tool.DefaultMaxOutput
// if limit ≤ 0) with its file in dir (os.TempDir() if "").
func newSpill(dir string, limit int64) *spill {
	if limit <= 0 {
		limit = tool.DefaultMaxOutput
	}
	if dir == "" {
		dir = os.TempDir()
	}
	return &spill{dir: dir, limit: limit}
}

// spillFor returns the spill of a call: its limit and spill directory.
func spillFor(call tool.Call) *spill { return newSpill(call.SpillDir, call.MaxOutput) }

// Write keeps what fits and always reports the whole of p written. If the
// spill file cannot be created, the head alone is kept; if writing to it
// fails, what it holds so far is kept; the rest is dropped either way, and
// the note says why.
func (s *spill) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tail = append(s.tail, p[max(len(p)-tailBytes, 0):]...)
	if len(s.tail) > tailBytes {
		s.tail = append(s.tail[:0], s.tail[len(s.tail)-tailBytes:]...)
	}
	keep := p[:min(int64(len(p)), max(s.limit-s.kept, 0))]
	s.dropped += int64(len(p) - len(keep))
	if len(keep) == 0 {
		return len(p), nil
	}
	if s.f == nil && s.err == nil && len(s.head)+len(keep) > tool.MinShown {
		f, err := os.CreateTemp(s.dir, "callsheet-output-*")
		if err == nil {
			if _, err = f.Write(s.head); err != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
		if err == nil {
			s.f = f
		} else {
			s.err = err
		}
	}
	var stored []byte
	switch {
	case s.f != nil && s.err == nil:
		n, err := s.f.Write(keep)
		stored = keep[:n]
		if err != nil {
			s.err = err
		}
	case s.f != nil: // the file failed earlier: it holds what it holds
	case s.err == nil: // it all fits in the head
		stored = keep
	default: // no file could be made: the head is all there is
		stored = keep[:min(len(keep), max(tool.MinShown-len(s.head), 0))]
	}
	s.dropped += int64(len(keep) - len(stored))
	if len(stored) == 0 {
		return len(p), nil
	}
	if room := tool.MinShown - len(s.head); room > 0 {
		s.head = append(s.head, stored[:min(room, len(stored))]...)
	}
	s.kept += int64(len(stored))
	s.lines += bytes.Count(stored, []byte{'\n'})
	s.last = stored[len(stored)-1]
	return len(p), nil
}

// Head returns the start of the output, at most tool.MinShown bytes.
func (s *spill) Head() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head[:len(s.head):len(s.head)]
}

// Tail returns the last bytes written (at most tailBytes), kept or not.
func (s *spill) Tail() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.tail...)
}

// Spilled reports whether the output outgrew the head: the head is then only
// its start, and Output must carry the whole.
func (s *spill) Spilled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f != nil || s.dropped > 0
}

// Empty reports whether nothing was written.
func (s *spill) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept == 0 && s.dropped == 0
}

// note says what was not kept, with the limit's config key, or "".
func (s *spill) note() string {
	switch {
	case s.dropped == 0:
		return ""
	case s.err != nil:
		return fmt.Sprintf("\n[output cut at %d bytes: the spill file failed (%v); %d more bytes were discarded]\n", s.kept, s.err, s.dropped)
	}
	return fmt.Sprintf("\n[output cut at %d bytes, the limit limits.output_bytes_per_call: %d more bytes were discarded]\n", s.kept, s.dropped)
}

// Output returns the whole output as a tool.Output: the kept bytes, the note
// on what was dropped, then trailer (a shell's "exit code N"), with a newline
// before the trailer if the output did not end with one. It takes over the
// spill file; the spill must not be written to afterwards. When the output
// never outgrew the head there is no file, and the head is the output.
func (s *spill) Output(trailer string) tool.Output {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.note()
	if trailer != "" && end == "" && s.kept > 0 && s.last != '\n' {
		end = "\n"
	}
	end += trailer
	o := &spilledOutput{f: s.f, head: s.head, kept: s.kept, end: end}
	o.lines = s.lines + strings.Count(end, "\n")
	if last := lastByte(s.last, s.kept, end); o.Size() > 0 && last != '\n' {
		o.lines++
	}
	s.f = nil
	return o
}

func lastByte(last byte, kept int64, end string) byte {
	if end != "" {
		return end[len(end)-1]
	}
	if kept > 0 {
		return last
	}
	return 0
}

// Discard removes the spill file, if any. The spill is not used afterwards.
func (s *spill) Discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
}

// spilledOutput is a spill's output, handed to the runtime as tool.Output.
type spilledOutput struct {
	f     *os.File // nil: the output is head alone
	head  []byte
	kept  int64
	end   string
	lines int

	mu     sync.Mutex
	closed bool
}

var _ tool.Output = (*spilledOutput)(nil)

func (o *spilledOutput) Size() int64 { return o.kept + int64(len(o.end)) }
func (o *spilledOutput) Lines() int  { return o.lines }

// Open reads the kept bytes from the spill file (or the head), then the end.
func (o *spilledOutput) Open() (io.ReadCloser, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, os.ErrClosed
	}
	var body io.Reader = bytes.NewReader(o.head[:min(int64(len(o.head)), o.kept)])
	if o.f != nil {
		body = io.NewSectionReader(o.f, 0, o.kept)
	}
	return io.NopCloser(io.MultiReader(body, strings.NewReader(o.end))), nil
}

// Close removes the spill file.
func (o *spilledOutput) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	if o.f == nil {
		return nil
	}
	err := o.f.Close()
	if rerr := os.Remove(o.f.Name()); err == nil {
		err = rerr
	}
	return err
}
