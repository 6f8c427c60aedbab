package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error it returns is
// an ErrInvalid, and that a configuration it accepts survives a round trip
// through encoding/json unchanged.
func FuzzParse(f *testing.F) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(full),
		`{}`,
		`{"concurrency": {"tool_calls": 1}, "durability": "interval"}`,
		`{"retry": {"initial_delay": 5, "max_delay": "1h"}}`,
		`{"command_tools": [` + validTool + `]}`,
		`{"agents": {"a": {"tools": []}, "b": {"tools": null}}}`,
		`{"permission": {"rules": [{"tool": "*", "match": "[a-", "action": "ask"}]}}`,
		`{"tenants": {"a": {"token": "x"}}}`,
		`{"mcp_servers": {"fs": {"command": ["node", "fs.js", "/srv"], "env": {"A": "1"}, "cwd": "/", "trust_annotations": true, "tools": {"write_file": {"effect": "side_effecting", "timeout": "5s"}}}}}`,
		`{"mcp_servers": {"web": {"url": "http://127.0.0.1:3001/mcp", "headers": {"Authorization": "Bearer x"}}, "a__b": {}}}`,
		`{"a": 1, "a": 2}`,
		`[]`,
		`{} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error = %v, want one wrapping ErrInvalid", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config Validate refuses: %v", err)
		}
		// Escaping HTML would rewrite "<" inside input schemas, which are
		// kept verbatim (compacted); the parsed Config would differ.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c); err != nil {
			t.Fatalf("Marshal error = %v", err)
		}
		again, err := Parse(b.Bytes())
		if err != nil {
			t.Fatalf("Parse(Marshal(c)) error = %v\ninput: %q\nmarshaled: %s", err, data, b.Bytes())
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("Parse(Marshal(c)) = %+v, want %+v\nmarshaled: %s", again, c, b.Bytes())
		}
	})
}

// FuzzParseTenants checks that ParseTenants never panics, that every error
// it returns is an ErrInvalid, and that tenants it accepts come back the
// same through encoding/json and a second parse.
func FuzzParseTenants(f *testing.F) {
	for _, seed := range []string{
		`{"tenants": {"a": {"token": "x"}}}`,
		`{"tenants": {"a": {"tokens": [{"token_sha256": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", "principal": "p", "scopes": ["read", "admin"]}], "retention": "1h", "limits": {"sessions_per_tenant": 3}}}}`,
		`{"tenants": {}}`,
		`{"tenants": null}`,
		`{"tenants": {"a": {"token": "x"}}, "limits": {}}`,
		`{"tenants": {"a": {"tokens": [{"token": "x", "scopes": []}]}}}`,
		`{"tenants": {"a": {"token": "x", "limits": {"calls_per_turn": 99999}}}}`,
		`{"tenants": {"a": {"token": "x", "limits": {"workers_per_tenant": {"exclusive": 2, "parallel_safe": 300}}}}}`,
		`{"tenants": {"a": {"token": "x", "limits": {"workers": {"exclusive": 1}, "workers_per_tenant": {"isolated_background": -1}}}}}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	c := DefaultConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := c.ParseTenants(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseTenants error = %v, want one wrapping ErrInvalid", err)
			}
			return
		}
		b, err := json.Marshal(map[string]any{"tenants": ts})
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.ParseTenants(b)
		if err != nil {
			t.Fatalf("ParseTenants(Marshal(tenants)) error = %v\ninput: %q\nmarshaled: %s", err, data, b)
		}
		if !reflect.DeepEqual(ts, again) {
			t.Fatalf("ParseTenants(Marshal(tenants)) = %+v, want %+v", again, ts)
		}
	})
}
