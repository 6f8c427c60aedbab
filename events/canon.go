package events

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// The canonical JSON encoding the hash chain is computed over
// (docs/events.md, "The canonical encoding").
//
// It is RFC 8785, the JSON Canonicalization Scheme (JCS): no whitespace,
// object members sorted by their names' UTF-16 code units, strings with only
// '"', '\\' and the control characters escaped (\b \t \n \f \r by name, the
// others as \u00xx), and numbers in the ECMAScript Number-to-String layout.
// RFC 8785 is defined for I-JSON (RFC 7493) only, and an event's payload can
// hold model output that is not I-JSON, so the encoding says what happens
// there too:
//
//   - A number is laid out from its exact decimal value and is never rounded
//     to a double. RFC 8785 parses a number into an IEEE 754 double, so two
//     integers beyond 2^53 that round to the same double (a 19-digit message
//     id and its neighbour) would canonicalize alike, and a change from one to
//     the other would go unseen by the chain. For every number whose value is
//     that of the shortest form of a double (every number encoding/json
//     writes, every integer of magnitude up to 2^53, 4.50, 1E30) the result
//     is RFC 8785's, byte for byte; RFC 8785's own 333333333.33333329 stays
//     333333333.33333329 here where RFC 8785 writes 333333333.3333333.
//   - Text that is not Unicode becomes U+FFFD: each byte that is not part of
//     valid UTF-8 (as utf8.DecodeRune reads it, one byte at a time), and each
//     \u escape of a surrogate that is not half of a pair.
//   - An object with a repeated member name keeps every member, sorted
//     stably: members of the same name stay in their order.
//
// The encoder is hand-written rather than taken from a JCS library for
// those three rules and for speed: the session actor hashes every event it
// mints (docs/performance.md, "The hash chain").

// ErrCanonical is wrapped by the error Canonical returns for input that is
// not JSON.
var ErrCanonical = errors.New("events: not canonicalizable JSON")

// maxCanonicalDepth bounds nesting, as encoding/json does.
const maxCanonicalDepth = 10000

// Canonical returns the canonical encoding (above) of the JSON text src: one
// JSON value, optionally surrounded by whitespace. It fails with an error
// wrapping ErrCanonical, naming the byte offset, for anything else. It is
// safe for concurrent use.
func Canonical(src []byte) ([]byte, error) {
	return AppendCanonical(nil, src)
}

// AppendCanonical appends the canonical encoding of src to dst; see
// Canonical.
func AppendCanonical(dst, src []byte) ([]byte, error) {
	c := canonPool.Get().(*canonicalizer)
	defer canonPool.Put(c)
	c.src, c.pos = src, 0
	c.skipSpace()
	out, err := c.value(dst, 0)
	if err != nil {
		c.src = nil
		return dst, err
	}
	c.skipSpace()
	if c.pos != len(c.src) {
		err = c.errorf("unexpected %s after the value", c.what())
		c.src = nil
		return dst, err
	}
	c.src = nil
	return out, nil
}

var canonPool = sync.Pool{New: func() any { return &canonicalizer{} }}

// canonicalizer is one run of the encoder over src; the slices are scratch
// space kept between runs (canonPool).
type canonicalizer struct {
	src []byte
	pos int
	// keys holds decoded member names of the objects being encoded, for
	// sorting; tmp holds an object's members while they are reordered.
	keys []byte
	tmp  []byte
}

// member is one object member: its decoded name in keys and its encoding
// ("name":value) in the output.
type member struct {
	key        [2]int
	start, end int
}

func (c *canonicalizer) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrCanonical, c.pos, fmt.Sprintf(format, args...))
}

func (c *canonicalizer) what() string {
	if c.pos >= len(c.src) {
		return "end of input"
	}
	return strconv.QuoteRune(rune(c.src[c.pos]))
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(dst []byte, depth int) ([]byte, error) {
	if c.pos >= len(c.src) {
		return dst, c.errorf("unexpected end of input, want a value")
	}
	switch b := c.src[c.pos]; {
	case b == '{':
		return c.object(dst, depth+1)
	case b == '[':
		return c.array(dst, depth+1)
	case b == '"':
		return c.string(dst, nil)
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number(dst)
	case b == 't':
		return c.literal(dst, "true")
	case b == 'f':
		return c.literal(dst, "false")
	case b == 'n':
		return c.literal(dst, "null")
	default:
		return dst, c.errorf("unexpected %s, want a value", c.what())
	}
}

func (c *canonicalizer) literal(dst []byte, lit string) ([]byte, error) {
	if len(c.src)-c.pos < len(lit) || string(c.src[c.pos:c.pos+len(lit)]) != lit {
		return dst, c.errorf("unexpected %s, want %s", c.what(), lit)
	}
	c.pos += len(lit)
	return append(dst, lit...), nil
}

func (c *canonicalizer) array(dst []byte, depth int) ([]byte, error) {
	if depth > maxCanonicalDepth {
		return dst, c.errorf("nested deeper than %d", maxCanonicalDepth)
	}
	c.pos++ // '['
	dst = append(dst, '[')
	c.skipSpace()
	if c.pos < len(c.src) && c.src[c.pos] == ']' {
		c.pos++
		return append(dst, ']'), nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		var err error
		c.skipSpace()
		if dst, err = c.value(dst, depth); err != nil {
			return dst, err
		}
		c.skipSpace()
		if c.pos >= len(c.src) {
			return dst, c.errorf("unexpected end of input in an array")
		}
		switch c.src[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return append(dst, ']'), nil
		default:
			return dst, c.errorf("unexpected %s in an array, want ',' or ']'", c.what())
		}
	}
}

func (c *canonicalizer) object(dst []byte, depth int) ([]byte, error) {
	if depth > maxCanonicalDepth {
		return dst, c.errorf("nested deeper than %d", maxCanonicalDepth)
	}
	c.pos++ // '{'
	open := len(dst)
	dst = append(dst, '{')
	c.skipSpace()
	if c.pos < len(c.src) && c.src[c.pos] == '}' {
		c.pos++
		return append(dst, '}'), nil
	}
	keyBase := len(c.keys)
	var small [16]member
	ms := small[:0]
	sorted := true
	for {
		c.skipSpace()
		if c.pos >= len(c.src) || c.src[c.pos] != '"' {
			return dst, c.errorf("unexpected %s in an object, want a member name", c.what())
		}
		if len(ms) > 0 {
			dst = append(dst, ',')
		}
		m := member{start: len(dst)}
		m.key[0] = len(c.keys)
		var err error
		if dst, err = c.string(dst, &c.keys); err != nil {
			return dst, err
		}
		m.key[1] = len(c.keys)
		c.skipSpace()
		if c.pos >= len(c.src) || c.src[c.pos] != ':' {
			return dst, c.errorf("unexpected %s after a member name, want ':'", c.what())
		}
		c.pos++
		dst = append(dst, ':')
		c.skipSpace()
		if dst, err = c.value(dst, depth); err != nil {
			return dst, err
		}
		m.end = len(dst)
		if n := len(ms); n > 0 && compareUTF16(c.keys[ms[n-1].key[0]:ms[n-1].key[1]], c.keys[m.key[0]:m.key[1]]) > 0 {
			sorted = false
		}
		ms = append(ms, m)
		c.skipSpace()
		if c.pos >= len(c.src) {
			return dst, c.errorf("unexpected end of input in an object")
		}
		if c.src[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.src[c.pos] != '}' {
			return dst, c.errorf("unexpected %s in an object, want ',' or '}'", c.what())
		}
		c.pos++
		break
	}
	if !sorted {
		keys := c.keys
		slices.SortStableFunc(ms, func(a, b member) int {
			return compareUTF16(keys[a.key[0]:a.key[1]], keys[b.key[0]:b.key[1]])
		})
		// Members were encoded in input order after open+1, each but the
		// first preceded by ','; write them again in sorted order.
		c.tmp = append(c.tmp[:0], dst[open+1:]...)
		base := open + 1
		dst = dst[:base]
		for i, m := range ms {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, c.tmp[m.start-base:m.end-base]...)
		}
	}
	c.keys = c.keys[:keyBase]
	return append(dst, '}'), nil
}

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units, as
// RFC 8785 §3.2.3 sorts member names. UTF-8 byte order agrees with it except
// that a character above U+FFFF (a surrogate pair, D800..DBFF first) sorts
// before U+E000..U+FFFF in UTF-16 and after them in UTF-8.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ka, kb := utf16Key(ra), utf16Key(rb); ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// utf16Key is the first UTF-16 code unit of r, widened so that two runes
// with the same first unit (both above U+FFFF) still compare by code point,
// which is their UTF-16 order.
func utf16Key(r rune) uint64 {
	if r > 0xFFFF {
		hi, _ := utf16.EncodeRune(r)
		return uint64(hi)<<21 | uint64(r)
	}
	return uint64(r) << 21
}

// string decodes the JSON string at c.pos and appends its canonical
// encoding to dst; with keys set, also its decoded UTF-8 to *keys.
func (c *canonicalizer) string(dst []byte, keys *[]byte) ([]byte, error) {
	src := c.src
	i := c.pos + 1 // past '"'
	dst = append(dst, '"')
	for {
		// A run of characters that need nothing: copied as is.
		start := i
		for i < len(src) && plain[src[i]] {
			i++
		}
		dst = append(dst, src[start:i]...)
		if keys != nil {
			*keys = append(*keys, src[start:i]...)
		}
		if i >= len(src) {
			c.pos = i
			return dst, c.errorf("unexpected end of input in a string")
		}
		switch b := src[i]; {
		case b == '"':
			c.pos = i + 1
			return append(dst, '"'), nil
		case b < 0x20:
			c.pos = i
			return dst, c.errorf("control character %#02x in a string: JSON escapes it", b)
		case b == '\\' && i+1 < len(src) && keys == nil && sameEscape[src[i+1]]:
			// The escapes of '"', '\\', BS, FF, LF, CR and TAB by name: written
			// as they were. (A member name takes the general path, which also
			// decodes it for sorting.)
			dst = append(dst, src[i], src[i+1])
			i += 2
		case b == '\\' && keys == nil && i+5 < len(src) && src[i+1] == 'u' && src[i+2] == '0' && src[i+3] == '0' && hexPlain(src[i+4], src[i+5]) != 0:
			// \u00XX of printable ASCII (encoding/json writes <, > and & so):
			// the character itself.
			dst = append(dst, hexPlain(src[i+4], src[i+5]))
			i += 6
		case b == '\\':
			c.pos = i
			r, err := c.escape()
			if err != nil {
				return dst, err
			}
			i = c.pos
			dst = appendCanonicalRune(dst, r)
			if keys != nil {
				*keys = utf8.AppendRune(*keys, r)
			}
		default: // b >= 0x80
			r, n := utf8.DecodeRune(src[i:])
			// An invalid byte decodes as RuneError of width 1, written as
			// U+FFFD; valid UTF-8 is copied.
			if r == utf8.RuneError && n == 1 {
				dst = utf8.AppendRune(dst, r)
				if keys != nil {
					*keys = utf8.AppendRune(*keys, r)
				}
			} else {
				dst = append(dst, src[i:i+n]...)
				if keys != nil {
					*keys = append(*keys, src[i:i+n]...)
				}
			}
			i += n
		}
	}
}

// hexPlain returns the byte two hex digits name when it is one a string
// writes as is (plain), else 0.
func hexPlain(h, l byte) byte {
	v := unhex[h]<<4 | unhex[l]
	if unhex[h] == 0xFF || unhex[l] == 0xFF || v >= utf8.RuneSelf || !plain[v] {
		return 0
	}
	return v
}

// unhex maps a hex digit to its value, anything else to 0xFF.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for i, d := range "0123456789abcdef" {
		t[d] = byte(i)
	}
	for i, d := range "ABCDEF" {
		t[d] = byte(10 + i)
	}
	return t
}()

// sameEscape marks the escapes RFC 8785 writes as JSON wrote them.
var sameEscape = [256]bool{'"': true, '\\': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// plain marks the bytes a string copies as they are: printable ASCII but '"'
// and '\\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// escape decodes the escape at c.pos (a backslash) into one rune. A \u
// escape of a high surrogate followed by one of a low surrogate is one
// rune; a surrogate escape that is not half of such a pair is U+FFFD.
func (c *canonicalizer) escape() (rune, error) {
	if c.pos+1 >= len(c.src) {
		return 0, c.errorf("unexpected end of input in an escape")
	}
	e := c.src[c.pos+1]
	c.pos += 2
	switch e {
	case '"', '\\', '/':
		return rune(e), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := c.hex4(c.pos)
		if !ok {
			c.pos -= 2
			return 0, c.errorf("bad \\u escape, want four hex digits")
		}
		c.pos += 4
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r < 0xDC00 && c.pos+1 < len(c.src) && c.src[c.pos] == '\\' && c.src[c.pos+1] == 'u' {
			if lo, ok := c.hex4(c.pos + 2); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				c.pos += 6
				return utf16.DecodeRune(r, lo), nil
			}
		}
		return utf8.RuneError, nil
	default:
		c.pos -= 2
		return 0, c.errorf("unknown escape \\%s", strconv.QuoteRune(rune(e)))
	}
}

func (c *canonicalizer) hex4(at int) (rune, bool) {
	if at+4 > len(c.src) {
		return 0, false
	}
	var r rune
	for _, h := range c.src[at : at+4] {
		switch {
		case h >= '0' && h <= '9':
			r = r<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// appendCanonicalRune writes r as RFC 8785 writes it inside a string.
func appendCanonicalRune(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// AppendCanonicalString appends s as a canonical JSON string: invalid UTF-8
// becomes U+FFFD, and only '"', '\\' and control characters are escaped.
// Runs of characters written as they are (all but those) are copied whole.
func AppendCanonicalString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && canonPlain8(jsonstr.Load64(s, i)) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if plain[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendCanonicalRune(dst, rune(b))
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = utf8.AppendRune(dst, utf8.RuneError)
			start = i + 1
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// number lays out the JSON number at c.pos from its exact decimal value in
// the ECMAScript Number-to-String layout (ECMA-262, Number::toString; RFC
// 8785 §3.2.2.3), without rounding it to a double.
func (c *canonicalizer) number(dst []byte) ([]byte, error) {
	start := c.pos
	neg := false
	if c.src[c.pos] == '-' {
		neg = true
		c.pos++
	}
	intStart := c.pos
	switch {
	case c.pos < len(c.src) && c.src[c.pos] == '0':
		c.pos++
	case c.pos < len(c.src) && c.src[c.pos] >= '1' && c.src[c.pos] <= '9':
		for c.pos < len(c.src) && isDigit(c.src[c.pos]) {
			c.pos++
		}
	default:
		return dst, c.errorf("bad number %q: want a digit", c.src[start:c.pos])
	}
	intDigits := c.src[intStart:c.pos]
	var frac []byte
	if c.pos < len(c.src) && c.src[c.pos] == '.' {
		c.pos++
		fs := c.pos
		for c.pos < len(c.src) && isDigit(c.src[c.pos]) {
			c.pos++
		}
		if c.pos == fs {
			return dst, c.errorf("bad number %q: want a digit after '.'", c.src[start:c.pos])
		}
		frac = c.src[fs:c.pos]
	}
	var expDigits []byte
	expNeg := false
	if c.pos < len(c.src) && (c.src[c.pos] == 'e' || c.src[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.src) && (c.src[c.pos] == '+' || c.src[c.pos] == '-') {
			expNeg = c.src[c.pos] == '-'
			c.pos++
		}
		es := c.pos
		for c.pos < len(c.src) && isDigit(c.src[c.pos]) {
			c.pos++
		}
		if c.pos == es {
			return dst, c.errorf("bad number %q: want a digit in the exponent", c.src[start:c.pos])
		}
		expDigits = c.src[es:c.pos]
	}
	return appendDecimal(dst, neg, intDigits, frac, expNeg, expDigits), nil
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// appendDecimal writes the number (-)int.frac e(-)exp. Its significant
// digits s (k of them, no leading or trailing zero) and n, with value
// s × 10^(n−k), are laid out as ECMAScript does.
func appendDecimal(dst []byte, neg bool, intDigits, frac []byte, expNeg bool, expDigits []byte) []byte {
	// The significant digits: int and frac together, zeros trimmed.
	lead := 0
	for lead < len(intDigits) && intDigits[lead] == '0' {
		lead++
	}
	// s lives on the stack for every number but the longest.
	var buf [64]byte
	s := buf[:0]
	// pointPos is where the decimal point sits in s's untrimmed digits,
	// counted from s's first digit: value = 0.s × 10^pointPos before the
	// exponent.
	var pointPos int
	if lead < len(intDigits) {
		s = append(s, intDigits[lead:]...)
		pointPos = len(intDigits) - lead
		s = append(s, frac...)
	} else {
		fl := 0
		for fl < len(frac) && frac[fl] == '0' {
			fl++
		}
		s = append(s, frac[fl:]...)
		pointPos = -fl
	}
	end := len(s)
	for end > 0 && s[end-1] == '0' {
		end--
	}
	s = s[:end]
	if len(s) == 0 {
		return append(dst, '0') // zero, and minus zero
	}
	if neg {
		dst = append(dst, '-')
	}
	k := len(s)
	// n = pointPos + exponent. The exponent is usually small; a long one
	// goes through big.Int so that no two exponents collapse.
	exp, small := smallExponent(expNeg, expDigits)
	if !small {
		n := new(big.Int)
		n.SetString(string(expDigits), 10)
		if expNeg {
			n.Neg(n)
		}
		n.Add(n, big.NewInt(int64(pointPos)))
		// |n| is far beyond 21: exponent form, exponent n−1.
		dst = append(dst, s[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, s[1:]...)
		}
		n.Sub(n, big.NewInt(1))
		dst = append(dst, 'e')
		if n.Sign() >= 0 {
			dst = append(dst, '+')
		}
		return n.Append(dst, 10)
	}
	n := int64(pointPos) + exp
	switch {
	case int64(k) <= n && n <= 21:
		dst = append(dst, s...)
		for i := int64(k); i < n; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, s[:n]...)
		dst = append(dst, '.')
		dst = append(dst, s[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := n; i < 0; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, s...)
	default:
		dst = append(dst, s[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, s[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, n-1, 10)
	}
	return dst
}

// smallExponent parses an exponent of at most 15 significant digits; small
// is false for a longer one.
func smallExponent(neg bool, digits []byte) (int64, bool) {
	i := 0
	for i < len(digits) && digits[i] == '0' {
		i++
	}
	if len(digits)-i > 15 {
		return 0, false
	}
	var e int64
	for _, d := range digits[i:] {
		e = e*10 + int64(d-'0')
	}
	if neg {
		e = -e
	}
	return e, true
}
