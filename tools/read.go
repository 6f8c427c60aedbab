package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Limits of the read tool.
const (
	// DefaultReadLimit is how many lines read returns when the call gives
	// no limit: 2,000, the runtime's default line cap.
	DefaultReadLimit = 2000
	// MaxReadBytes is the largest file read returns without a line range
	// (10 MiB), and the largest image it returns at all. With offset or
	// limit a larger text file is streamed and only the range is held.
	MaxReadBytes = 10 << 20
	// maxLineBytes cuts a single line held in memory (64 KiB); the
	// runtime's byte cap is smaller anyway.
	maxLineBytes = 64 << 10
	// sniffBytes is how much of a file decides whether it is binary.
	sniffBytes = 8 << 10
)

// readArgs are the read tool's arguments.
type readArgs struct {
	Path   string `json:"path" jsonschema:"the file or directory to read, relative to the workspace (an absolute path inside the workspace works too)"`
	Offset int    `json:"offset,omitempty" jsonschema:"the first line to return, counting from 1 (default 1)" minimum:"1"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many lines to return (default 2000)" minimum:"1"`
}

// newRead builds the read tool: read_only, safe, parallel_safe; its touched
// path is the path it reads.
func newRead() (*tool.Tool, error) {
	return tool.New("read",
		"Read a text file as numbered lines (like cat -n), a range of them with offset and limit, "+
			"or list a directory. PNG, JPEG, GIF and WebP files are returned as images.",
		runRead,
		tool.WithShortDescription("Read a file (line ranges, images) or list a directory."),
		tool.WithGuidelines(
			"Use read to look at a file before changing it, and to list a directory.",
			"Files are returned 2000 lines at a time; continue with offset for the rest. Use offset and limit for large files.",
			"Binary files other than images are refused; do not read them.",
		),
		tool.WithSnippet(`{"path": "src/main.go", "offset": 120, "limit": 80}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectReadOnly,
			Replay:      tool.ReplaySafe,
			Concurrency: tool.ConcurrencyParallelSafe,
		}),
		tool.WithTouchedPaths(func(a readArgs) []string { return cleanPaths(a.Path) }),
	)
}

// runRead is the read tool's function. The file is opened through the
// workspace's os.Root (non-blocking, so a FIFO cannot hang the call) and
// judged by what was opened, never by a separate look at the path.
func runRead(ctx context.Context, a readArgs) (tool.Result, error) {
	ws, err := workspaceFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	rel, real, err := ws.Resolve(a.Path)
	if err != nil {
		return tool.Result{}, fmt.Errorf("read: %w", err)
	}
	f, err := ws.Root().OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return tool.Result{}, fileError("read", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return tool.Result{}, fileError("read", rel, err)
	}
	switch {
	case fi.IsDir():
		return listDir(f, rel, a)
	case !fi.Mode().IsRegular():
		return tool.Result{}, tool.Permanent(fmt.Errorf("read %s: not a regular file (%s); read takes files and directories", rel, fi.Mode().Type()))
	}

	head := make([]byte, sniffBytes)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return tool.Result{}, fileError("read", rel, err)
	}
	head = head[:n]

	if mime := imageType(head); mime != "" {
		if fi.Size() > MaxReadBytes {
			return tool.Result{}, tool.Permanent(fmt.Errorf("read %s: the %s image is %d bytes, over the %d-byte limit for images", rel, mime, fi.Size(), MaxReadBytes))
		}
		rest, err := io.ReadAll(io.LimitReader(f, MaxReadBytes))
		if err != nil {
			return tool.Result{}, fileError("read", rel, err)
		}
		data := append(head, rest...)
		return tool.Result{Parts: []tool.Part{
			{Type: tool.PartText, Text: fmt.Sprintf("%s: %s image, %d bytes", rel, mime, len(data))},
			{Type: tool.PartImage, MIME: mime, Data: data},
		}}, nil
	}
	if why := binaryReason(head, n == sniffBytes); why != "" {
		return tool.Result{}, tool.Permanent(fmt.Errorf("read %s: this looks like a binary file (%s); read returns text and PNG, JPEG, GIF or WebP images only", rel, why))
	}
	if fi.Size() > MaxReadBytes && a.Offset == 0 && a.Limit == 0 {
		return tool.Result{}, tool.Permanent(fmt.Errorf("read %s: the file is %d bytes, over the %d-byte limit for a whole file; read part of it with offset and limit (for example offset 1, limit %d)", rel, fi.Size(), MaxReadBytes, DefaultReadLimit))
	}
	return readLines(io.MultiReader(bytes.NewReader(head), f), rel, a)
}

// readLines returns lines offset.. offset+limit-1 of r, numbered like cat -n,
// with a note when more lines follow.
func readLines(r io.Reader, rel string, a readArgs) (tool.Result, error) {
	offset, limit := max(a.Offset, 1), a.Limit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var out strings.Builder
	lineNo, last := 0, offset+limit-1
	more := false
	for {
		keep := lineNo+1 >= offset && lineNo+1 <= last
		line, cut, err := readLine(br, keep)
		if err != nil && err != io.EOF {
			return tool.Result{}, fileError("read", rel, err)
		}
		if line == nil && err == io.EOF {
			break
		}
		lineNo++
		if lineNo > last {
			more = true
			break
		}
		if keep {
			fmt.Fprintf(&out, "%6d\t%s", lineNo, strings.ToValidUTF8(string(line), "\uFFFD"))
			if cut > 0 {
				fmt.Fprintf(&out, " … [line cut: %d more bytes]", cut)
			}
			out.WriteByte('\n')
			if out.Len() > MaxReadBytes && lineNo < last {
				// Hold no more than a whole-file read would.
				fmt.Fprintf(&out, "(stopped after %d bytes; continue with offset %d)\n", out.Len(), lineNo+1)
				return tool.Text(out.String()), nil
			}
		}
		if err == io.EOF {
			break
		}
	}
	switch {
	case lineNo == 0:
		return tool.Text(fmt.Sprintf("(%s is empty)", rel)), nil
	case offset > lineNo:
		return tool.Result{}, fmt.Errorf("read %s: offset %d is past the end of the file, which has %d lines", rel, offset, lineNo)
	case more:
		fmt.Fprintf(&out, "(more lines follow; continue with offset %d)\n", last+1)
	}
	return tool.Text(out.String()), nil
}

// readLine reads one line without its newline. When keep is false the line
// is skipped and nil (or an empty slice) returned; when true at most
// maxLineBytes are held and cut counts the rest. At the end of input it
// returns a nil line and io.EOF, or the last unterminated line and io.EOF.
func readLine(br *bufio.Reader, keep bool) (line []byte, cut int, err error) {
	seen := false
	for {
		chunk, err := br.ReadSlice('\n')
		seen = seen || len(chunk) > 0
		chunk = bytes.TrimSuffix(chunk, []byte{'\n'})
		if keep {
			take := min(max(maxLineBytes-len(line), 0), len(chunk))
			line = append(line, chunk[:take]...)
			cut += len(chunk) - take
		}
		if err == bufio.ErrBufferFull {
			continue // a line longer than the buffer: read on
		}
		if !seen {
			return nil, 0, err
		}
		if line == nil {
			line = []byte{}
		}
		return line, cut, err
	}
}

// listDir lists the entries of the open directory dir sorted by name, a
// "/" after each directory, honouring offset and limit as entry numbers.
func listDir(dir *os.File, rel string, a readArgs) (tool.Result, error) {
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return tool.Result{}, fileError("list", rel, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return tool.Text(fmt.Sprintf("(%s is an empty directory)", rel)), nil
	}
	offset, limit := max(a.Offset, 1), a.Limit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	if offset > len(names) {
		return tool.Result{}, fmt.Errorf("list %s: offset %d is past the end of the directory, which has %d entries", rel, offset, len(names))
	}
	end := min(offset-1+limit, len(names))
	text := strings.Join(names[offset-1:end], "\n") + "\n"
	if end < len(names) {
		text += fmt.Sprintf("(%d entries in all; continue with offset %d)\n", len(names), end+1)
	}
	return tool.Text(text), nil
}

// imageType returns the MIME type of a PNG, JPEG, GIF or WebP image judged by
// its first bytes, or "".
func imageType(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(head, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(head, []byte("GIF87a")), bytes.HasPrefix(head, []byte("GIF89a")):
		return "image/gif"
	case len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// binaryReason says why head (the first bytes of a file) looks binary, or ""
// for text: a NUL byte, or invalid UTF-8 making up more than 30% of it (a
// Latin-1 text with a few accents is still text). full says head was cut at
// sniffBytes, so a rune split at its end is not counted.
func binaryReason(head []byte, full bool) string {
	if i := bytes.IndexByte(head, 0); i >= 0 {
		return fmt.Sprintf("a NUL byte at offset %d", i)
	}
	invalid := 0
	for i := 0; i < len(head); {
		r, size := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && size == 1 {
			if full && !utf8.FullRune(head[i:]) {
				break
			}
			invalid++
		}
		i += size
	}
	if len(head) > 0 && invalid*10 > len(head)*3 {
		return fmt.Sprintf("%d of its first %d bytes are not UTF-8", invalid, len(head))
	}
	return ""
}

// fileError words a file-system error for the model: what failed, on which
// workspace path, and why, without the absolute path of the workspace. The
// workspace's os.Root refusing to leave it (a directory swapped for a link
// while the call ran) becomes an *workspace.OutsideError naming rel.
func fileError(op, rel string, err error) error {
	if workspace.Escaped(err) {
		return fmt.Errorf("%s: %w", op, &workspace.OutsideError{Path: rel})
	}
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return tool.Permanent(fmt.Errorf("%s %s: no such file or directory", op, rel))
	case errors.Is(err, fs.ErrPermission):
		return tool.Permanent(fmt.Errorf("%s %s: permission denied", op, rel))
	}
	return fmt.Errorf("%s %s: %w", op, rel, err)
}

// cleanPaths returns p as a declared path (mutated or touched): cleaned and
// workspace-relative when relative, cleaned when absolute (the runtime
// resolves it against the workspace), and nothing for a path that cannot be
// used (empty, NUL, or climbing out with ".."), since such a call touches no
// file.
func cleanPaths(p string) []string {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return nil
	}
	c := filepath.Clean(p)
	if !filepath.IsAbs(c) && (c == ".." || strings.HasPrefix(c, "../")) {
		return nil
	}
	return []string{c}
}
