package tool

import (
	"encoding/json"
	"strconv"
	"strings"
)

// maxIntegerDigits is the longest integer integerLiteral writes out: 20
// digits hold every uint64 and int64, so a longer integer fits no Go integer
// field and is left as the model wrote it (decoding then says it does not
// fit). The bound also keeps 1e999999 from becoming a million zeros.
const maxIntegerDigits = 20

// decimal is a JSON number literal taken apart: its value is
// ±digits × 10^exp, digits without leading or trailing zeros ("" for zero).
// huge is +1 or -1 when the exponent is too large to hold (more than 15
// digits, beyond anything the digits of a request can outweigh), by its sign.
type decimal struct {
	neg    bool
	digits string
	exp    int64
	huge   int
}

// parseDecimal takes apart a JSON number literal as encoding/json accepted
// it. It works on the digits alone, without math/big, so a hostile exponent
// (1e99999999999999999999) costs nothing.
func parseDecimal(n string) decimal {
	var d decimal
	d.neg = strings.HasPrefix(n, "-")
	n = strings.TrimPrefix(n, "-")
	mant, exp := n, ""
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		mant, exp = n[:i], n[i+1:]
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	d.exp, d.huge = exponent(exp)
	d.exp -= int64(len(frac))
	d.digits = strings.TrimRight(digits, "0")
	d.exp += int64(len(digits) - len(d.digits))
	return d
}

// magnitude is the decimal order of a non-zero value: 10^(m-1) ≤ |v| < 10^m.
func (d decimal) magnitude() int64 { return int64(len(d.digits)) + d.exp }

// integerLiteral reads a JSON number literal (as encoding/json accepted it)
// and reports whether its value is an integer, as JSON Schema counts one: a
// number with a zero fractional part, however written (2, 2.0, 1e2, 1.50e1,
// 200e-1). For an integer of at most maxIntegerDigits digits it also returns
// the plain integer literal of the same value ("2", "100", "-0"), which
// encoding/json decodes into a Go integer; else lit is "". A hostile
// exponent costs nothing: 1e99999999999999999999 is an integer too large to
// write, 1e-99999999999999999999 not an integer.
func integerLiteral(n string) (lit string, integral bool) {
	if digits, ok := plainInteger(n); ok {
		// Already plain, as most integers are: no fraction, no exponent,
		// and JSON allows no leading zeros.
		if len(digits) > maxIntegerDigits {
			return "", true
		}
		return n, true
	}
	d := parseDecimal(n)
	sign := ""
	if d.neg {
		sign = "-"
	}
	switch {
	case d.digits == "":
		return sign + "0", true // zero, whatever its exponent
	case d.huge != 0:
		return "", d.huge > 0 // beyond any bound: integral only if positive
	case d.exp < 0:
		return "", false
	case d.magnitude() > maxIntegerDigits:
		return "", true
	}
	return sign + d.digits + strings.Repeat("0", int(d.exp)), true
}

// sameNumber compares two JSON number literals by value: 5, 5.0, 5e0 and
// 50e-1 are the same, and so are 0 and -0. Numbers whose exponent is too
// large to hold compare as written.
func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	da, db := parseDecimal(string(a)), parseDecimal(string(b))
	switch {
	case da.huge != 0 || db.huge != 0:
		return false
	case da.digits == "" || db.digits == "":
		return da.digits == db.digits
	}
	return da.neg == db.neg && da.digits == db.digits && da.exp == db.exp
}

// exponent parses a JSON number's exponent ("", "2", "+2", "-12"). An
// exponent of more than 15 digits is reported as huge, +1 or -1 by its
// sign: the digits of an 8 MiB request cannot outweigh it.
func exponent(s string) (e int64, huge int) {
	sign := int64(1)
	switch {
	case strings.HasPrefix(s, "-"):
		sign, s = -1, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	s = strings.TrimLeft(s, "0")
	if s == "" {
		return 0, 0
	}
	if len(s) > 15 {
		return 0, int(sign)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // not digits: encoding/json would not have passed it
		return 0, 0
	}
	return sign * v, 0
}

// plainInteger reports whether a JSON number literal is an integer written
// without fraction or exponent, and returns its digits (without the sign).
func plainInteger(n string) (digits string, ok bool) {
	digits = strings.TrimPrefix(n, "-")
	if digits == "" {
		return "", false
	}
	for i := 0; i < len(digits); i++ {
		if !isDigit(digits[i]) {
			return "", false
		}
	}
	return digits, true
}

// isInteger reports whether a JSON number is an integer as JSON Schema
// counts one (see integerLiteral).
func isInteger(n json.Number) bool {
	_, ok := integerLiteral(n.String())
	return ok
}

// integerForms rewrites, in place, every number in a parsed arguments value
// whose value is an integer into its plain integer literal, so that
// encoding/json decodes 2.0 into a Go int as JSON Schema says it may. It
// runs on the copy the typed decoder reads; the recorded arguments stay as
// the model sent them. It returns the rewritten value.
func integerForms(v any) any {
	switch x := v.(type) {
	case json.Number:
		if lit, _ := integerLiteral(x.String()); lit != "" && lit != string(x) {
			return json.Number(lit)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = integerForms(e)
		}
	case []any:
		for i, e := range x {
			x[i] = integerForms(e)
		}
	}
	return v
}
