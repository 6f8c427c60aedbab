// Package jsonread reads one JSON document token by token, as
// encoding/json's Decoder does, and refuses what a strict reader must: a
// key that appears twice in one object (encoding/json keeps the last one
// silently, and another reader of the same bytes may keep the first) and
// nesting deeper than a bound. It keeps the path to the current value as a
// stack of the keys and indexes it passed, so its memory is linear in the
// document whatever its depth, and renders a path only for an error.
//
// The HTTP API's request bodies (api/decode.go), a call's arguments
// (tool.NormalizeArguments) and the node's config file (config.Parse) are
// all read with it.
package jsonread

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting a Reader accepts unless MaxDepth says
// otherwise: encoding/json's own limit.
const DefaultMaxDepth = 10000

// Path shortening for messages: at most pathHead leading and pathTail
// trailing segments, each key cut to pathKey bytes.
const (
	pathHead = 6
	pathTail = 4
	pathKey  = 64
)

// DuplicateKeyError is a key that appears twice in one object.
type DuplicateKeyError struct {
	// Object is the path of the object (see Reader.Path), "" for the
	// document itself; shortened for a message when it is deep.
	Object string
	// Key is the second key as sent; Prev the first, which differs from it
	// only when keys compare folded (see Reader.Fold).
	Key, Prev string
	// Offset is where the second key starts in the document.
	Offset int64
}

func (e *DuplicateKeyError) Error() string {
	where := "the document"
	if e.Object != "" {
		where = e.Object
	}
	if e.Prev != e.Key {
		return fmt.Sprintf("%s has the key %q twice, as %q and %q", where, e.Prev, e.Prev, e.Key)
	}
	return fmt.Sprintf("%s has the key %q twice", where, e.Key)
}

// DepthError is an object or array that opens deeper than the bound.
type DepthError struct {
	// Path is where the value that is too deep begins, shortened.
	Path string
	// Max is the bound.
	Max int
	// Offset is where its opening bracket is in the document.
	Offset int64
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("nesting deeper than %d levels at %s", e.Max, orDocument(e.Path))
}

func orDocument(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// Option configures New.
type Option func(*Reader)

// MaxDepth bounds the nesting of objects and arrays: the document's own
// value is at depth 1. Default DefaultMaxDepth; n < 1 means the default.
func MaxDepth(n int) Option {
	return func(r *Reader) {
		if n >= 1 {
			r.maxDepth = n
		}
	}
}

// Members sets how a path names an object member, for errors and Path:
// join(path, key) returns path with key appended ("" is the top). Default
// Member, with no dot before a first key.
func Members(join func(path, key string) string) Option {
	return func(r *Reader) { r.member = join }
}

// UseNumber makes numbers json.Number rather than float64, as
// json.Decoder.UseNumber does.
func UseNumber() Option {
	return func(r *Reader) { r.dec.UseNumber() }
}

// Reader reads one JSON document. It is not safe for concurrent use.
type Reader struct {
	data     []byte
	dec      *json.Decoder
	maxDepth int
	member   func(path, key string) string
	stack    []frame
	off      int64
	isKey    bool
	err      error
}

// frame is one open object or array.
type frame struct {
	array bool
	// index is the current element of an array, -1 before the first.
	index int
	// key is the current member of an object; wantKey says the next token
	// is a key (or the closing brace).
	key     string
	wantKey bool
	// fold: keys compare as encoding/json matches struct fields.
	fold bool
	// seen maps each key read so far, in its compared form, to the key as
	// sent; nil until the second key, the first being kept in first (its
	// compared form) and firstSent.
	seen             map[string]string
	first, firstSent string
	keys             int
}

// New returns a Reader of data.
func New(data []byte, opts ...Option) *Reader {
	r := &Reader{data: data, dec: json.NewDecoder(bytes.NewReader(data)), maxDepth: DefaultMaxDepth, member: topMember}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Token returns the next token as json.Decoder.Token does: json.Delim for
// brackets, string for keys and strings, float64 or json.Number, bool, nil.
// After a key that repeats one of its object it returns a
// *DuplicateKeyError, after an object or array past the depth bound a
// *DepthError; errors of the decoder (a *json.SyntaxError, io.EOF at the
// end) are returned as they are. Once it has returned an error it returns
// the same error again.
func (r *Reader) Token() (json.Token, error) {
	if r.err != nil {
		return nil, r.err
	}
	r.off, r.isKey = r.nextStart(), false
	tok, err := r.dec.Token()
	if err != nil {
		r.err = err
		return nil, err
	}
	var top *frame
	if n := len(r.stack); n > 0 {
		top = &r.stack[n-1]
	}
	if top != nil && top.wantKey {
		if key, ok := tok.(string); ok {
			if err := top.addKey(key); err != nil {
				err.Object, err.Offset = r.render(len(r.stack)-1), r.off
				r.err = err
				return nil, err
			}
			top.wantKey, r.isKey = false, true
			return tok, nil
		}
	}
	switch tok {
	case json.Delim('}'), json.Delim(']'):
		r.stack = r.stack[:len(r.stack)-1]
		r.ended()
		return tok, nil
	}
	if top != nil && top.array {
		top.index++
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		if len(r.stack) >= r.maxDepth {
			r.err = &DepthError{Path: r.render(len(r.stack)), Max: r.maxDepth, Offset: r.off}
			return nil, r.err
		}
		r.stack = append(r.stack, frame{array: tok == json.Delim('['), index: -1, wantKey: tok == json.Delim('{')})
	default:
		r.ended()
	}
	return tok, nil
}

// ended marks the value just read as complete in its parent.
func (r *Reader) ended() {
	if n := len(r.stack); n > 0 && !r.stack[n-1].array {
		r.stack[n-1].wantKey = true
	}
}

// addKey records key in the object, refusing one it has.
func (f *frame) addKey(key string) *DuplicateKeyError {
	cmp := key
	if f.fold {
		cmp = FoldName(key)
	}
	f.key = key
	f.keys++
	if f.keys == 1 {
		f.first, f.firstSent = cmp, key
		return nil
	}
	if f.seen == nil {
		f.seen = map[string]string{f.first: f.firstSent}
	}
	if prev, dup := f.seen[cmp]; dup {
		return &DuplicateKeyError{Key: key, Prev: prev}
	}
	f.seen[cmp] = key
	return nil
}

// IsKey reports whether the last token Token returned was an object key.
func (r *Reader) IsKey() bool { return r.isKey }

// More reports whether the current object or array has another element,
// as json.Decoder.More does.
func (r *Reader) More() bool { return r.err == nil && r.dec.More() }

// Depth is how many objects and arrays are open.
func (r *Reader) Depth() int { return len(r.stack) }

// Offset is where the last token Token returned begins in the document.
func (r *Reader) Offset() int64 { return r.off }

// Fold makes the keys of the innermost open object compare as
// encoding/json matches struct fields, regardless of case (FoldName);
// call it right after the object's '{'. Keys compare exactly otherwise.
func (r *Reader) Fold() {
	if n := len(r.stack); n > 0 {
		r.stack[n-1].fold = true
	}
}

// Path renders where the reader is: the key or index of the current member
// of each open object and array ("calls[0].arguments",
// `a["odd key"][2]`), "" at the top. Deep paths are shortened with "…".
func (r *Reader) Path() string { return r.render(len(r.stack)) }

// PathOf renders the path of the object or array open at depth: "" for
// the document's own value (depth 1).
func (r *Reader) PathOf(depth int) string { return r.render(min(max(depth-1, 0), len(r.stack))) }

// render renders the members of the first n open frames; a frame that has
// no member yet (just opened) adds nothing.
func (r *Reader) render(n int) string {
	path := ""
	for i := 0; i < n; i++ {
		if i == pathHead && n > pathHead+pathTail {
			path += "…"
			i = n - pathTail
		}
		f := &r.stack[i]
		switch {
		case f.array && f.index >= 0:
			path = Index(path, f.index)
		case !f.array && f.keys > 0:
			key := f.key
			if len(key) > pathKey {
				key = strings.ToValidUTF8(key[:pathKey], "") + "…"
			}
			path = r.member(path, key)
		}
	}
	return path
}

// topMember is Member with no dot before a first key.
func topMember(path, key string) string {
	if path == "" && isIdent(key) {
		return key
	}
	return Member(path, key)
}

// Member appends an object member to a path: path.key for a key that is an
// identifier (^[A-Za-z_][A-Za-z0-9_]*$), else path["key"].
func Member(path, key string) string {
	if isIdent(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// Index appends an array element to a path: path[i].
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// isIdent reports whether key matches ^[A-Za-z_][A-Za-z0-9_]*$.
func isIdent(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// nextStart is where the next token begins: past whitespace and the ':'
// or ',' the decoder has not consumed yet.
func (r *Reader) nextStart() int64 {
	off := r.dec.InputOffset()
	for off < int64(len(r.data)) {
		switch r.data[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
			continue
		}
		break
	}
	return off
}

// Skip reads the rest of the value whose first token tok was: nothing for
// a scalar, up to the matching bracket for '{' or '['.
func (r *Reader) Skip(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := len(r.stack) - 1; len(r.stack) > depth; {
		if _, err := r.Token(); err != nil {
			return err
		}
	}
	return nil
}

// Value reads one whole value: map[string]any for an object, []any for an
// array, and the scalars Token returns.
func (r *Reader) Value() (any, error) {
	tok, err := r.Token()
	if err != nil {
		return nil, err
	}
	return r.rest(tok)
}

// rest reads the value whose first token is tok.
func (r *Reader) rest(tok json.Token) (any, error) {
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for r.More() {
			kt, err := r.Token()
			if err != nil {
				return nil, err
			}
			v, err := r.Value()
			if err != nil {
				return nil, err
			}
			obj[kt.(string)] = v
		}
		if _, err := r.Token(); err != nil { // '}'
			return nil, err
		}
		return obj, nil
	case json.Delim('['):
		arr := []any{}
		for r.More() {
			v, err := r.Value()
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := r.Token(); err != nil { // ']'
			return nil, err
		}
		return arr, nil
	}
	return tok, nil
}

// FoldName is the form encoding/json compares struct field names in (its
// own foldName): two names are the same field when their folded forms are
// equal. ASCII letters are upper-cased, other runes mapped through
// unicode.ToUpper(unicode.ToLower(r)), so "ſ" folds like "s" and the Kelvin
// sign like "k".
func FoldName(s string) string {
	b := make([]rune, 0, len(s))
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		case r >= utf8.RuneSelf:
			r = unicode.ToUpper(unicode.ToLower(r))
		}
		b = append(b, r)
	}
	return string(b)
}
