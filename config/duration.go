package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Duration is a time.Duration that reads from JSON as a Go duration string
// ("5s", "250ms", "1m30s") or as a whole number of milliseconds (250), and
// writes as a string. JSON null leaves it unchanged. The zero value is zero.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string, which UnmarshalJSON reads back
// exactly.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a whole number of milliseconds.
// A bad value returns an *Error (wrapping ErrInvalid) that says what is
// accepted.
func (d *Duration) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return &Error{Reason: fmt.Sprintf("%s is not a duration: %v", data, err)}
	}
	got, reason := durationOf(v)
	if reason != "" {
		return &Error{Reason: reason}
	}
	*d = got
	return nil
}

// durationOf converts a decoded JSON value (strings as string, numbers as
// json.Number) to a Duration, or says why it cannot.
func durationOf(v any) (Duration, string) {
	const want = `write a Go duration such as "5s" or "250ms", or a whole number of milliseconds`
	switch v := v.(type) {
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n != 0 {
			return 0, fmt.Sprintf("%q has no unit (write %q for milliseconds, or %q for seconds)", v, v+"ms", v+"s")
		}
		got, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Sprintf("%q is not a duration (%s)", v, want)
		}
		return Duration(got), ""
	case json.Number:
		ms, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			if _, ferr := strconv.ParseFloat(string(v), 64); ferr == nil && !isRangeErr(err) {
				return 0, fmt.Sprintf("%s is not a whole number of milliseconds (%s)", v, want)
			}
			return 0, fmt.Sprintf("%s milliseconds is out of range (the longest duration is about 292 years)", v)
		}
		if ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
			return 0, fmt.Sprintf("%s milliseconds is out of range (the longest duration is about 292 years)", v)
		}
		return Duration(time.Duration(ms) * time.Millisecond), ""
	default:
		return 0, fmt.Sprintf("want a duration, got %s (%s)", describe(v), want)
	}
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
