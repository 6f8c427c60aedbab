package security

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// nestedObject is a JSON object nested levels deep, each level one key of
// keyLen bytes.
func nestedObject(levels, keyLen int) string {
	key := strings.Repeat("k", keyLen)
	return strings.Repeat(`{"`+key+`":`, levels-1) + `{}` + strings.Repeat("}", levels-1)
}

// TestDeepBodiesKeepMemoryFlat sends a real node, fenced in a 512 MiB memory
// cgroup (2 GiB when the figures before the fix were taken), the bodies that took one to 1.27 GB and got another OOM-killed
// (issue 27): objects nested 2,000 deep with 200-byte keys (0.4 MiB) and
// 9,900 deep with 790-byte keys (7.5 MiB), as a call's arguments and as a
// harness tool's input_schema. Each must be a 400 that says why, the node
// must live, and its peak RSS stay near where it started: decoding is linear
// in the body, and arguments nest at most tool.MaxArgumentDepth levels.
func TestDeepBodiesKeepMemoryFlat(t *testing.T) {
	p := node(t, nil)
	how, cgroupPeak := fence(t, p.PID(), 512<<20)
	t.Logf("node fenced by %s", how)
	s := open(t, p, "")
	rss, _ := memory(t, p.PID())
	resetPeak(t, p.PID())
	for _, c := range []struct {
		name, method, path, body string
		msgs                     []string
	}{
		{"arguments 2,000 deep, 200-byte keys", "POST", "/v1/sessions/" + s + "/turns",
			`{"calls":[{"id":"c1","name":"write","arguments":` + nestedObject(2000, 200) + `}]}`,
			[]string{"calls[0].arguments nests deeper than 64 levels", "tool.MaxArgumentDepth"}},
		{"arguments 9,900 deep, 790-byte keys", "POST", "/v1/sessions/" + s + "/turns",
			`{"calls":[{"id":"c1","name":"write","arguments":` + nestedObject(9900, 790) + `}]}`,
			[]string{"nests deeper than 64 levels"}},
		{"input_schema 9,900 deep, 790-byte keys", "PUT", "/v1/tools/deep",
			`{"description":"d","input_schema":` + nestedObject(9900, 790) + `}`,
			[]string{"input_schema"}},
	} {
		var raw []byte
		code, err := p.Do(c.method, c.path, c.body, &raw)
		if err != nil {
			select {
			case <-p.Done():
				t.Fatalf("%s (%d bytes): %v; the node died: %v (cgroup peak %d MiB)", c.name, len(c.body), err, p.Err(), cgroupPeak()>>20)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s (%d bytes): %v", c.name, len(c.body), err)
			}
		}
		_, peak := memory(t, p.PID())
		t.Logf("%s: a %d-byte body; node RSS %d MiB before, peak %d MiB since (cgroup peak %d MiB)", c.name, len(c.body), rss>>20, peak>>20, cgroupPeak()>>20)
		if peak > rss+128<<20 {
			t.Errorf("%s: node peak RSS %d MiB, from %d MiB: decoding a body must not cost many times its size", c.name, peak>>20, rss>>20)
		}
		if code != http.StatusBadRequest || !containsAll(string(raw), c.msgs) {
			t.Errorf("%s: %d %.300s, want 400 saying %q", c.name, code, raw, c.msgs)
		}
	}
	if evs, err := p.Events(s); err != nil || len(evs) != 2 {
		t.Fatalf("refused bodies left %d events (%v), want only SessionOpened and OwnershipTaken", len(evs), err)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
