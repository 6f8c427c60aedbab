package tool

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// maxFastDepth is the deepest nesting fastParseArguments follows; deeper
// arguments take the token decoder (parseArgumentsStd), which refuses them
// with the message.
const maxFastDepth = MaxArgumentDepth

// fastParseArguments is parseArguments for arguments it can parse alone: in
// one pass over the bytes, without encoding/json's token decoder, it checks
// the JSON grammar, writes the compact form, builds the value and refuses
// duplicate keys. data is trimmed, non-empty and not "null". It reports false
// for anything it does not accept (invalid JSON, not an object, a duplicate
// key, nesting deeper than maxFastDepth), and parseArguments then takes the
// standard path, which accepts or refuses as before and writes the message.
// So only what it accepts needs to be right: for that, the compact bytes and
// the value are those of parseArgumentsStd, as FuzzFastParseAsStd holds it.
func fastParseArguments(data []byte) (json.RawMessage, map[string]any, bool) {
	if data[0] == '"' {
		// A string holding the object: unwrap it as parseArgumentsStd does.
		p := fastParser{data: data}
		s, ok := p.str()
		if !ok || p.pos != len(data) {
			return nil, nil, false
		}
		trimmed := strings.TrimSpace(s)
		if trimmed == "" || trimmed == "null" {
			return json.RawMessage("{}"), map[string]any{}, true
		}
		data = []byte(trimmed)
	}
	if data[0] != '{' {
		return nil, nil, false
	}
	p := fastParser{data: data, out: make([]byte, 0, len(data))}
	v, ok := p.object()
	if !ok {
		return nil, nil, false
	}
	p.ws()
	if p.pos != len(data) {
		return nil, nil, false
	}
	return p.out, v, true
}

// fastParser is the state of one fastParseArguments: the input, the position
// in it, the compact output so far and the current nesting depth.
type fastParser struct {
	data  []byte
	pos   int
	out   []byte
	depth int
}

// ws skips JSON whitespace (RFC 8259 §2: space, tab, line feed, carriage
// return; nothing else).
func (p *fastParser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value after optional whitespace.
func (p *fastParser) value() (any, bool) {
	p.ws()
	if p.pos >= len(p.data) {
		return nil, false
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return nil, false
}

// object parses an object; p.pos is at its '{'.
func (p *fastParser) object() (map[string]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	p.pos++
	p.out = append(p.out, '{')
	obj := map[string]any{}
	p.ws()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '}')
		p.depth--
		return obj, true
	}
	for {
		p.ws()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, false
		}
		key, ok := p.str()
		if !ok {
			return nil, false
		}
		if _, dup := obj[key]; dup {
			return nil, false // the standard path says where
		}
		p.ws()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, false
		}
		p.pos++
		p.out = append(p.out, ':')
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		obj[key] = v
		p.ws()
		if p.pos >= len(p.data) {
			return nil, false
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
		case '}':
			p.pos++
			p.out = append(p.out, '}')
			p.depth--
			return obj, true
		default:
			return nil, false
		}
	}
}

// array parses an array; p.pos is at its '['. An empty array is []any{},
// as decodeValue makes it.
func (p *fastParser) array() (any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	p.pos++
	p.out = append(p.out, '[')
	arr := []any{}
	p.ws()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		p.depth--
		return arr, true
	}
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		arr = append(arr, v)
		p.ws()
		if p.pos >= len(p.data) {
			return nil, false
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			p.depth--
			return arr, true
		default:
			return nil, false
		}
	}
}

// literal consumes word (true, false or null) at p.pos.
func (p *fastParser) literal(word string) bool {
	if end := p.pos + len(word); end > len(p.data) || string(p.data[p.pos:end]) != word {
		return false
	}
	p.pos += len(word)
	p.out = append(p.out, word...)
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number parses a number; p.pos is at its first byte.
func (p *fastParser) number() (any, bool) {
	end := numberEnd(p.data, p.pos)
	if end < 0 {
		return nil, false
	}
	tok := p.data[p.pos:end]
	p.out = append(p.out, tok...)
	p.pos = end
	return json.Number(tok), true
}

// numberEnd returns where the number starting at d[i] ends, or -1 when none
// starts there. A number is what RFC 8259 §6 writes:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. What follows it is the
// caller's to check ("01" ends after the 0, and the 1 is then refused).
func numberEnd[T ~string | ~[]byte](d T, i int) int {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return -1
	case d[i] == '0':
		i++
	case isDigit(d[i]):
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return -1
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return -1
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	return i
}

// str parses a string; p.pos is at its opening quote. The compact form
// keeps the string's bytes as sent (as json.Compact does). Its value is the
// bytes themselves when they are plain ASCII or valid UTF-8 with only
// one-character escapes; anything else (\u escapes, invalid UTF-8, which
// encoding/json replaces with U+FFFD) is decoded by encoding/json itself, so
// every value is the one the token decoder would give.
func (p *fastParser) str() (string, bool) {
	d := p.data
	i := p.pos + 1
	plain, simple := true, true
	for {
		if i >= len(d) {
			return "", false
		}
		c := d[i]
		if c == '"' {
			break
		}
		switch {
		case c == '\\':
			plain = false
			i++
			if i >= len(d) {
				return "", false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(d) || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return "", false
				}
				simple = false
				i += 5
			default:
				return "", false
			}
		case c < 0x20:
			return "", false // control characters must be escaped
		case c >= utf8.RuneSelf:
			plain = false
			i++
		default:
			i++
		}
	}
	tok := d[p.pos : i+1]
	p.out = append(p.out, tok...)
	p.pos = i + 1
	inner := tok[1 : len(tok)-1]
	switch {
	case plain:
		return string(inner), true
	case simple && utf8.Valid(inner):
		return unescapeSimple(inner), true
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return "", false
	}
	return s, true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// unescapeSimple decodes a string's content whose only escapes are the
// one-character ones (\" \\ \/ \b \f \n \r \t), as str has checked.
func unescapeSimple(s []byte) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = s[i]
		}
		b.WriteByte(c)
	}
	return b.String()
}
