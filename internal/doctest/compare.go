package doctest

import (
	"fmt"
	"regexp"
	"strings"
)

// Ellipsis in documented output stands for any text, on one line or
// across several: what the docs trimmed.
const Ellipsis = "…"

// Placeholders of the values that differ from run to run. Both the
// documented and the printed output are normalised, so the docs may show
// real values from a real run.
const (
	PlaceID   = "ULID"
	PlaceTime = "TIME"
	PlaceDur  = "DUR"
	PlaceHex  = "HEX"
	PlaceB64  = "B64"
	PlacePort = "PORT"
	PlacePID  = "PID"
	PlaceNum  = "NUM"
)

// DocRoot is the checkout's path as the docs show it: a printed path under
// the fresh clone the test runs in is shown under this one.
const DocRoot = "/home/me/callsheet"

// DocHost is the machine's host name as the docs show it.
const DocHost = "vm"

type replacement struct {
	re   *regexp.Regexp
	with string
}

// normalisers, in order: ids and times first, so that the digits inside
// them are not taken for numbers or hex.
var normalisers = []replacement{
	{regexp.MustCompile(`\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b`), PlaceID},
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?( ?UTC|Z|[+-]\d{2}:\d{2})?`), PlaceTime},
	{regexp.MustCompile(`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?`), PlaceTime},
	{regexp.MustCompile(`\b\d{2}:\d{2}:\d{2}\.\d{3}\b`), PlaceTime},
	{regexp.MustCompile(`[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT`), PlaceTime},
	{regexp.MustCompile(`(^|[^0-9A-Za-z])[0-9a-f]{32,}`), "${1}" + PlaceHex},
	{regexp.MustCompile(`[A-Za-z0-9+/]{42,}={1,2}`), PlaceB64},
	{regexp.MustCompile(`(127\.0\.0\.1|localhost|\[::1\]):\d+`), "${1}:" + PlacePort},
	{regexp.MustCompile(`\bpid \d+`), "pid " + PlacePID},
	{regexp.MustCompile(`"pid":\d+`), `"pid":` + PlacePID},
	{regexp.MustCompile(`"duration_ms":[0-9.e+-]+`), `"duration_ms":` + PlaceNum},
	{regexp.MustCompile(`[+]?\b\d+(\.\d+)? ?(ns|µs|us|ms|s)\b`), PlaceDur},
}

// Normaliser rewrites what changes from run to run. Root is the fresh
// clone's path (shown as DocRoot) and Host the machine's name (shown as
// DocHost); either may be empty.
type Normaliser struct {
	Root string
	Host string
}

// Normalise returns s with the run's paths and host shown as the docs
// show them, then every id, time, duration, hash, key, port and pid
// replaced by its placeholder.
func (n Normaliser) Normalise(s string) string {
	if n.Root != "" && n.Root != DocRoot {
		s = strings.ReplaceAll(s, n.Root, DocRoot)
	}
	if n.Host != "" && n.Host != DocHost {
		for _, ctx := range []string{`on host %s`, `"host":"%s"`, `"node":"%s"`, `callsheet-node "%s"`} {
			s = strings.ReplaceAll(s, fmt.Sprintf(ctx, n.Host), fmt.Sprintf(ctx, DocHost))
		}
	}
	for _, r := range normalisers {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// Mismatch says where printed output leaves what the docs show.
type Mismatch struct {
	// Want and Got are the normalised documented and printed output.
	Want, Got string
	// Piece is the first documented piece (between ellipses) not found
	// where it should be, and At the offset in Got from which it was
	// looked for.
	Piece string
	At    int
}

func (m *Mismatch) Error() string {
	got := m.Got[min(m.At, len(m.Got)):]
	return fmt.Sprintf("the output leaves the docs at %q\nwant (from there): %q\ngot (from there):  %q", firstLine(m.Piece), clip(m.Piece, 300), clip(got, 300))
}

// Match compares printed output with documented output: both normalised,
// trailing spaces and blank lines at the ends ignored, Ellipsis matching
// anything. With json, whitespace outside JSON strings does not count
// either, so a pretty-printed answer matches a compact one. It returns nil
// or a *Mismatch.
func Match(n Normaliser, want, got string, json bool) error {
	w, g := tidy(n.Normalise(want)), tidy(n.Normalise(got))
	if json {
		w, g = squeezeJSON(w), squeezeJSON(g)
	}
	pieces := strings.Split(w, Ellipsis)
	at := 0
	for i, p := range pieces {
		switch {
		case i == 0:
			if !strings.HasPrefix(g, p) {
				cp := commonPrefix(g, p)
				return &Mismatch{Want: w, Got: g, Piece: p[cp:], At: cp}
			}
			at = len(p)
		case i == len(pieces)-1:
			if !strings.HasSuffix(g[at:], p) {
				return &Mismatch{Want: w, Got: g, Piece: p, At: at}
			}
			at = len(g)
		default:
			k := strings.Index(g[at:], p)
			if k < 0 {
				return &Mismatch{Want: w, Got: g, Piece: p, At: at}
			}
			at += k + len(p)
		}
	}
	if len(pieces) == 1 && at != len(g) {
		return &Mismatch{Want: w, Got: g, Piece: Ellipsis + "(the end)", At: at}
	}
	return nil
}

// tidy drops trailing spaces of each line and blank lines at both ends.
func tidy(s string) string {
	ls := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(ls, "\n"), "\n")
}

// squeezeJSON removes whitespace outside JSON strings (a string is read
// from its quote to the next unescaped quote; whatever is not JSON, such
// as an ellipsis, is kept as it is).
func squeezeJSON(s string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimLeft(s, "\n"), "\n")
	return clip(l, 120)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + Ellipsis
}
