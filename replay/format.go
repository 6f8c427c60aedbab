package replay

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Formatting shared by the Markdown and the timeline page, so a text reader
// and a page reader see the same numbers.

// clock renders an instant as UTC wall time to the millisecond.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}

// when renders an instant with its date, to the millisecond, in UTC.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC"
}

// dur renders a duration with three significant digits or so: 0.09 ms,
// 12.3 ms, 450 ms, 1.25 s, 2m3s.
func dur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%s%.2f ms", neg, ms)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%s%.1f ms", neg, ms)
	case d < time.Second:
		return fmt.Sprintf("%s%.0f ms", neg, ms)
	case d < 10*time.Second:
		return fmt.Sprintf("%s%.2f s", neg, ms/1000)
	case d < time.Minute:
		return fmt.Sprintf("%s%.1f s", neg, ms/1000)
	}
	return neg + d.Round(time.Second).String()
}

// offset renders t relative to base: "+12.3 ms".
func offset(base, t time.Time) string {
	if t.IsZero() || base.IsZero() {
		return "-"
	}
	d := t.Sub(base)
	if d < 0 {
		return dur(d)
	}
	return "+" + dur(d)
}

// durMS renders a handler time recorded in milliseconds.
func durMS(ms float64) string {
	return dur(time.Duration(ms * float64(time.Millisecond)))
}

// plural renders "1 attempt", "2 attempts".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// clip cuts s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// short renders a node id or another long token by its last 8 characters,
// the part that differs between ULIDs minted close together.
func short(id string) string {
	r := []rune(id)
	if len(r) <= 10 {
		return id
	}
	return "…" + string(r[len(r)-8:])
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
