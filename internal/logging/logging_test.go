package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestNewLevelsAndFormats(t *testing.T) {
	for _, tc := range []struct {
		name, level, format string
		wantErr             string
		debug, info         bool
		json                bool
	}{
		{name: "default", level: "", format: "", info: true},
		{name: "debug json", level: "debug", format: "json", debug: true, info: true, json: true},
		{name: "warn", level: "WARN", format: "text"},
		{name: "error", level: "error", format: "json", json: true},
		{name: "bad level", level: "verbose", format: "text", wantErr: `--log-level "verbose": use one of debug, info, warn, error`},
		{name: "bad format", level: "info", format: "logfmt", wantErr: `--log-format "logfmt": use text or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := New(&buf, tc.level, tc.format)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l.Debug("d", KeySession, "s1")
			l.Info("i", KeySession, "s1")
			out := buf.String()
			if got := strings.Contains(out, "msg=d") || strings.Contains(out, `"msg":"d"`); got != tc.debug {
				t.Errorf("debug line written=%v, want %v: %s", got, tc.debug, out)
			}
			if got := strings.Contains(out, "msg=i") || strings.Contains(out, `"msg":"i"`); got != tc.info {
				t.Errorf("info line written=%v, want %v: %s", got, tc.info, out)
			}
			if tc.json && out != "" {
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					var m map[string]any
					if err := json.Unmarshal([]byte(line), &m); err != nil {
						t.Fatalf("json line %q: %v", line, err)
					}
					if m[KeySession] != "s1" || m["level"] == nil || m["time"] == nil {
						t.Errorf("json line %q lacks session, level or time", line)
					}
				}
			}
		})
	}
}

func TestOrNilDiscards(t *testing.T) {
	Or(nil).Error("nothing", "k", 1) // must not panic
	l := slog.New(slog.DiscardHandler)
	if Or(l) != l {
		t.Fatal("Or replaced a logger it was given")
	}
}
