package config

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadTenants reads a tenants file as the config's own tenants: tokens
// in the clear or by digest, scopes, retention and limits over the node's.
func TestLoadTenants(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.json")
	sum := sha256.Sum256([]byte("s3cret"))
	doc := `{"tenants": {
  "acme": {"tokens": [{"token": "a1", "principal": "alice", "scopes": ["read"]},
                      {"token_sha256": "` + strings.ToUpper(hexOf(sum[:])) + `", "principal": "bob"}],
           "retention": "720h", "limits": {"sessions_per_tenant": 5}}
}}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Limits.CallsPerTurn = 10
	ts, err := c.LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	acme := ts["acme"]
	if got := acme.Retention.String(); got != "720h0m0s" {
		t.Errorf("retention=%s, want 720h", got)
	}
	toks := acme.Principals("acme")
	if len(toks) != 2 || toks[0].Scopes[0] != ScopeRead || toks[1].Scopes != nil {
		t.Fatalf("tokens=%+v", toks)
	}
	if d, ok := toks[1].Digest(); !ok || d != sum {
		t.Errorf("digest of the hashed token=%x, %v; want %x (upper-case hex accepted)", d, ok, sum)
	}
	if d, ok := toks[0].Digest(); !ok || d != sha256.Sum256([]byte("a1")) {
		t.Errorf("digest of the clear token=%x, %v", d, ok)
	}
	l := c.LimitsFor(ts, "acme")
	if l.SessionsPerTenant != 5 || l.CallsPerTurn != 10 || l.BodyBytes != DefaultBodyBytes {
		t.Errorf("LimitsFor(acme)=%+v: want sessions 5 (its own), calls per turn 10 (the node's)", l)
	}
	if l := c.LimitsFor(ts, "nobody"); l != c.Limits {
		t.Errorf("LimitsFor(unknown)=%+v, want the node's %+v", l, c.Limits)
	}
}

// TestTenantsFileRefusals: every problem names the file, line and column;
// nothing but "tenants" may be in the file.
func TestTenantsFileRefusals(t *testing.T) {
	c := DefaultConfig()
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"another section", "{\"tenants\": {},\n \"limits\": {\"body_bytes\": 2048}}", `:2:12: limits: only "tenants" belongs in a tenants_file`},
		{"unknown field", `{"tenants": {"a": {"tokens": [{"token": "x", "scope": ["read"]}]}}}`, `:1:46: tenants.a.tokens[0].scope: unknown field "scope"`},
		{"bad scope", `{"tenants": {"a": {"tokens": [{"token": "x", "scopes": ["root"]}]}}}`, `tenants.a.tokens[0].scopes[0]: "root" is not a scope`},
		{"duplicate token", `{"tenants": {"a": {"token": "x"}, "b": {"token": "x"}}}`, `tenants.b.token: same token as tenant "a"`},
		{"not JSON", `{"tenants": {"a": `, "invalid JSON"},
		{"tenant limits over the node's", `{"tenants": {"a": {"token": "x", "limits": {"calls_per_turn": 99999}}}}`, "tenants.a.limits.calls_in_flight_per_tenant"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tenants.json")
			if err := os.WriteFile(path, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := c.LoadTenants(path)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadTenants error = %v, want one naming %s and saying %q", err, path, tt.want)
			}
		})
	}
	if _, err := c.LoadTenants(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: error = %v, want fs.ErrNotExist", err)
	}
	ts, err := c.ParseTenants([]byte(`{"tenants": null}`))
	if err != nil || ts == nil || len(ts) != 0 {
		t.Fatalf("no tenants: %v, %v; want an empty table (every request refused)", ts, err)
	}
}

// TestTenantsFileIsRelativeToTheConfig: Load makes a relative tenants_file
// relative to the config file's directory, and the config is then
// MultiTenant.
func TestTenantsFileIsRelativeToTheConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.json")
	if err := os.WriteFile(path, []byte(`{"tenants_file": "secrets/tenants.json"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "secrets", "tenants.json"); c.TenantsFile != want {
		t.Errorf("TenantsFile=%q, want %q", c.TenantsFile, want)
	}
	if !c.MultiTenant() || DefaultConfig().MultiTenant() {
		t.Errorf("MultiTenant: with a tenants_file %v, by default %v", c.MultiTenant(), DefaultConfig().MultiTenant())
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
