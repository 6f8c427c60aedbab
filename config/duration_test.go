package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDurationUnmarshal(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // substring; empty means success
	}{
		{`"5s"`, 5 * time.Second, ""},
		{`"250ms"`, 250 * time.Millisecond, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`"-1s"`, -time.Second, ""},
		{`"0"`, 0, ""}, // time.ParseDuration accepts a bare zero
		{`250`, 250 * time.Millisecond, ""},
		{`0`, 0, ""},
		{`-5`, -5 * time.Millisecond, ""},
		{`9223372036854`, 9223372036854 * time.Millisecond, ""},
		{`9223372036855`, 0, "out of range"},
		{`1e3`, 0, "whole number of milliseconds"},
		{`1.5`, 0, "whole number of milliseconds"},
		{`"500"`, 0, "no unit"},
		{`"5 s"`, 0, "not a duration"},
		{`""`, 0, "not a duration"},
		{`true`, 0, "want a duration"},
		{`{}`, 0, "want a duration"},
	}
	for _, tt := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("Unmarshal(%s) error = %v, want %v", tt.in, err, tt.want)
		case tt.wantErr == "" && d.Std() != tt.want:
			t.Errorf("Unmarshal(%s) = %v, want %v", tt.in, d, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Unmarshal(%s) error = %v, want one containing %q", tt.in, err, tt.wantErr)
		case tt.wantErr != "" && !errors.Is(err, ErrInvalid):
			t.Errorf("Unmarshal(%s) error = %v, want ErrInvalid", tt.in, err)
		}
	}
}

func TestDurationNullKeepsValue(t *testing.T) {
	d := Duration(time.Second)
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d.Std() != time.Second {
		t.Fatalf("Unmarshal(null) = %v, %v; want 1s, nil", d, err)
	}
}

func TestDurationMarshalRoundTrip(t *testing.T) {
	for _, want := range []Duration{0, 1, Duration(250 * time.Millisecond), Duration(90 * time.Second), -Duration(time.Hour), 1<<63 - 1, -1 << 63} {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatalf("Marshal(%v) error = %v", want, err)
		}
		if b[0] != '"' {
			t.Fatalf("Marshal(%v) = %s, want a string", want, b)
		}
		var got Duration
		if err := json.Unmarshal(b, &got); err != nil || got != want {
			t.Fatalf("Unmarshal(Marshal(%v)) = %v, %v; want %v", want, got, err, want)
		}
	}
}
