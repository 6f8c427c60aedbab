// Package jsonstr writes a string as encoding/json writes it (json.Marshal,
// HTML escaping on), fast: printable ASCII is checked eight bytes at a time
// and copied whole. The generated payload encoders of package events and
// the argument encoder of package tool both use it, so the two write the
// same bytes for the same string (docs/events.md, "One encoding per
// event").
package jsonstr

import "unicode/utf8"

// Append appends s as encoding/json writes a string (with its
// default HTML escaping): '"', '\\' and the control characters escaped
// (\b \f \n \r \t by name, the others as \u00xx), '<', '>' and '&' as
// \u003c, \u003e and \u0026, U+2028 and U+2029 as \u2028 and \u2029, and
// each byte that is not part of valid UTF-8 as \ufffd.
func Append(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && Safe8(Load64(s, i)) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			if safeByte[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safeByte marks the ASCII bytes encoding/json writes in a string as
// they are: printable ASCII (DEL included) but '"', '\\', '<', '>' and '&'.
var safeByte = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// Eight bytes of a string at a time: the strings of an event (ids, links,
// names, a tool's output) are mostly long runs of printable ASCII, which
// are checked a word at a time (the classic "has a byte less than n" bit
// tricks, exact for whether any byte is) and copied whole.
const (
	// LSB has the lowest bit of each byte set, MSB the highest.
	LSB = 0x0101010101010101
	MSB = 0x8080808080808080
)

// Load64 reads s[i:i+8] little-endian; the compiler makes it one load.
func Load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// HasLess is non-zero when a byte of x is less than n (n <= 128).
func HasLess(x uint64, n byte) uint64 { return (x - LSB*uint64(n)) & ^x & MSB }

// HasByte is non-zero when a byte of x is c.
func HasByte(x uint64, c byte) uint64 {
	y := x ^ (LSB * uint64(c))
	return (y - LSB) & ^y & MSB
}

// Safe8 reports whether every byte of x is one encoding/json writes as
// it is (safeByte).
func Safe8(x uint64) bool {
	return x&MSB|HasLess(x, 0x20)|HasByte(x, '"')|HasByte(x, '\\')|HasByte(x, '<')|HasByte(x, '>')|HasByte(x, '&') == 0
}
