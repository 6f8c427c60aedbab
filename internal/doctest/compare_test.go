package doctest

import (
	"errors"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	n := Normaliser{Root: "/tmp/TestDocs1/001/callsheet", Host: "ci-box"}
	for _, tc := range []struct {
		name, want, got string
		json, ok        bool
	}{
		{"equal", "hello", "hello\n", false, true},
		{"different", "16 events", "17 events", false, false},
		{"ids and times", `{"session":"01M8NYMKQW557M5ZQ3CAPJX3S8","opened":"2026-12-01T10:36:56.207034862Z"}`,
			`{"session":"01M8TCWSPZ300VZ5HBHMYW7AJQ","opened":"2026-12-02T03:31:11Z"}`, false, true},
		{"an id is not any word", `"session":"01M8NYMKQW557M5ZQ3CAPJX3S8"`, `"session":"none"`, false, false},
		{"hashes, keys and ports", "hash 3e0fcc068fb4ed9e4a24f530c76d5f3e00ce5881cf2940ace1258342fff0e605 at nats://127.0.0.1:35725, key PZ2UyizZvPH559NR+amAlQRGUopIMiNk55vtUPDesp0=",
			"hash 6259a9d592bef74acdccc58f80561ace520f22bb1a599ee8418399fec006a109 at nats://127.0.0.1:41003, key 5+SH/O2s5MMiMiMbjn8VahKVIBB7w96dbadlT0ullbo=", false, true},
		{"durations", "completed +42.3 ms, ran 0.23 ms", "completed +8.67 ms, ran 4 ms", false, true},
		{"the tree is the docs' checkout", `"workspace":"/home/me/callsheet/data/workspaces/default/demo"`,
			`"workspace":"/tmp/TestDocs1/001/callsheet/data/workspaces/default/demo"`, false, true},
		{"another path is not", `"workspace":"/home/me/callsheet/data"`, `"workspace":"/srv/data"`, false, false},
		{"the host is the docs' vm", `callsheet-node "vm" (pid 10327 on host vm, serving`, `callsheet-node "ci-box" (pid 4 on host ci-box, serving`, false, true},
		{"ellipsis within a line", `{"seq":1,"id":…,"type":"SessionOpened",…}`, `{"seq":1,"id":"x","time":"t","type":"SessionOpened","data":{}}`, false, true},
		{"ellipsis across lines", "first\n…\nlast", "first\nsecond\nthird\nlast", false, true},
		{"ellipsis keeps the order", "b…a", "a b", false, false},
		{"the end must match", "a…b", "a b c", false, false},
		{"json whitespace", "{\n  \"turn\": \"t1\",\n  \"results\": [ ]\n}", `{"turn":"t1","results":[]}`, true, true},
		{"json strings keep their spaces", `{"text": "a b"}`, `{"text":"ab"}`, true, false},
		{"text whitespace counts", `{"turn": "t1"}`, `{"turn":"t1"}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Match(n, tc.want, tc.got, tc.json)
			if (err == nil) != tc.ok {
				t.Fatalf("Match(%q, %q) = %v, want ok %v", tc.want, tc.got, err, tc.ok)
			}
			var m *Mismatch
			if err != nil && !errors.As(err, &m) {
				t.Fatalf("error %T, want *Mismatch", err)
			}
		})
	}
}

// TestMismatchSaysWhere: the error quotes the documented text from where
// the output leaves it, and the output from there.
func TestMismatchSaysWhere(t *testing.T) {
	err := Match(Normaliser{}, "verified 16 events of session S", "verified 17 events of session S", false)
	if err == nil || !strings.Contains(err.Error(), `want (from there): "6 events of session S"`) || !strings.Contains(err.Error(), `got (from there):  "7 events of session S"`) {
		t.Fatalf("error = %v", err)
	}
}

// FuzzMatch: output always matches itself as documented (normalising is
// idempotent on both sides), text or JSON, and Match never panics.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{
		`{"session":"01M8NYMKQW557M5ZQ3CAPJX3S8","seq":3}`,
		"verified 17 events … ok",
		"a\r\nb  \n\n",
		`"\"…"`,
		"2026-12-02 03:31:11.717 UTC +0.10 ms 127.0.0.1:7700",
	} {
		f.Add(s, s+"x", false)
	}
	f.Fuzz(func(t *testing.T, want, got string, json bool) {
		_ = Match(Normaliser{Root: "/r", Host: "h"}, want, got, json)
		if strings.Contains(got, Ellipsis) {
			return
		}
		if err := Match(Normaliser{Root: "/r", Host: "h"}, got, got, json); err != nil {
			t.Fatalf("output does not match itself: %v", err)
		}
	})
}
