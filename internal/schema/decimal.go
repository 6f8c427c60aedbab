package schema

import (
	"math/big"
	"strings"
)

// decimal is a JSON number taken apart exactly: its value is
// ±digits × 10^exp, with digits free of leading and trailing zeros ("" for
// zero). The exponent is a big.Int so that 1e99999999999999999999 is held
// as written; nothing ever computes 10^exp, so a hostile exponent costs no
// more than its digits.
type decimal struct {
	neg    bool
	digits string
	exp    *big.Int
}

// parseDecimal takes apart a number literal as encoding/json accepts it
// (-?int(.frac)?([eE][+-]?digits)?). ok is false for anything else.
func parseDecimal(n string) (d decimal, ok bool) {
	if n == "" {
		return d, false
	}
	if n[0] == '-' {
		d.neg = true
		n = n[1:]
	}
	mant, exp := n, ""
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		mant, exp = n[:i], n[i+1:]
		if exp == "" {
			return d, false
		}
	}
	whole, frac, hasFrac := strings.Cut(mant, ".")
	if whole == "" || !allDigits(whole) || len(whole) > 1 && whole[0] == '0' || hasFrac && (frac == "" || !allDigits(frac)) {
		return d, false
	}
	e := new(big.Int)
	if exp != "" {
		digits := exp
		if exp[0] == '+' || exp[0] == '-' {
			digits = exp[1:]
		}
		if !allDigits(digits) {
			return d, false
		}
		e.SetString(digits, 10)
		if exp[0] == '-' {
			e.Neg(e)
		}
	}
	digits := strings.TrimLeft(whole+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	e.Sub(e, big.NewInt(int64(len(frac))))
	e.Add(e, big.NewInt(int64(len(digits)-len(trimmed))))
	d.digits, d.exp = trimmed, e
	if d.digits == "" {
		d.neg, d.exp = false, new(big.Int)
	}
	return d, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (d decimal) zero() bool { return d.digits == "" }

// integer reports whether d has no fractional part, as JSON Schema counts
// integers (1.0 and 1e2 are integers).
func (d decimal) integer() bool { return d.zero() || d.exp.Sign() >= 0 }

// cmpDecimal compares a and b by value: -1, 0 or +1, exactly.
func cmpDecimal(a, b decimal) int {
	sa, sb := a.sign(), b.sign()
	if sa != sb {
		if sa < sb {
			return -1
		}
		return 1
	}
	if sa == 0 {
		return 0
	}
	c := cmpMagnitude(a, b)
	if sa < 0 {
		return -c
	}
	return c
}

func (d decimal) sign() int {
	switch {
	case d.zero():
		return 0
	case d.neg:
		return -1
	}
	return 1
}

// cmpMagnitude compares |a| and |b| for non-zero a and b: first by the
// position of the leading digit (len(digits)+exp), then digit by digit.
func cmpMagnitude(a, b decimal) int {
	ma := new(big.Int).Add(a.exp, big.NewInt(int64(len(a.digits))))
	mb := new(big.Int).Add(b.exp, big.NewInt(int64(len(b.digits))))
	if c := ma.Cmp(mb); c != 0 {
		return c
	}
	// Same leading position: the digit strings compare as written, and a
	// string that is a prefix of the other is the smaller (digits have no
	// trailing zeros).
	switch {
	case a.digits < b.digits:
		return -1
	case a.digits > b.digits:
		return 1
	}
	return 0
}

// multipleOf reports whether d is an integer multiple of m (m > 0), exactly:
// with d = a×10^p and m = b×10^q, d/m is an integer when p ≥ q and b divides
// a×10^(p−q) (10^(p−q) is taken modulo b, so a huge p costs its digits
// only), and never when p < q (a has no trailing zeros to spare).
func multipleOf(d, m decimal) bool {
	if d.zero() {
		return true
	}
	if d.exp.Cmp(m.exp) < 0 {
		return false
	}
	b, _ := new(big.Int).SetString(m.digits, 10)
	a := modDigits(d.digits, b)
	diff := new(big.Int).Sub(d.exp, m.exp)
	pow := new(big.Int).Exp(big.NewInt(10), diff, b)
	a.Mul(a, pow)
	a.Mod(a, b)
	return a.Sign() == 0
}

// modDigits returns digits (a decimal integer) modulo b, reading 18 digits
// at a time, so that its cost grows with len(digits) × len(b), not with
// the square of len(digits) as parsing a huge literal would.
func modDigits(digits string, b *big.Int) *big.Int {
	r := new(big.Int)
	chunk := new(big.Int)
	for len(digits) > 0 {
		n := min(18, len(digits))
		v, _ := new(big.Int).SetString(digits[:n], 10)
		chunk.Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
		r.Mul(r, chunk)
		r.Add(r, v)
		r.Mod(r, b)
		digits = digits[n:]
	}
	return r
}

// int64Value returns d as an int64 when it is a non-negative integer;
// larger values saturate at max (schema lengths and counts).
func (d decimal) count(max int64) (int64, bool) {
	if d.neg || !d.integer() {
		return 0, false
	}
	if d.zero() {
		return 0, true
	}
	mag := new(big.Int).Add(d.exp, big.NewInt(int64(len(d.digits))))
	if mag.Cmp(big.NewInt(19)) > 0 {
		return max, true
	}
	v, _ := new(big.Int).SetString(d.digits, 10)
	v.Mul(v, new(big.Int).Exp(big.NewInt(10), d.exp, nil))
	if !v.IsInt64() || v.Int64() > max {
		return max, true
	}
	return v.Int64(), true
}

// key is a canonical spelling of d's value, for uniqueItems: equal values
// have equal keys.
func (d decimal) key() string {
	if d.zero() {
		return "0"
	}
	s := d.digits + "e" + d.exp.String()
	if d.neg {
		return "-" + s
	}
	return s
}
