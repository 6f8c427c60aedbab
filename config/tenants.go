package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LoadTenants reads the tenants file at path (Config.TenantsFile) and
// checks it as c's own tenants would be checked, each tenant's limits over
// c's (see ParseTenants). Every *Error it returns names the file; a file
// that cannot be read gives the os error wrapped, not ErrInvalid.
func (c Config) LoadTenants(path string) (map[string]Tenant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: read tenants_file: %w", err)
	}
	ts, errs := c.parseTenants(data)
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = path
		}
		return nil, join(errs)
	}
	return ts, nil
}

// ParseTenants reads a tenants file: one JSON object holding "tenants" and
// nothing else, {"tenants": {"acme": {"tokens": [...]}}}, held to the
// config's rules (strict shape, tokens unique across tenants, principals,
// scopes, retention, and each tenant's limits over c's). "tenants": {} (or
// null) names no tenant: every request is then refused. Errors are as
// Parse's, located in data.
func (c Config) ParseTenants(data []byte) (map[string]Tenant, error) {
	ts, errs := c.parseTenants(data)
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return ts, nil
}

func (c Config) parseTenants(data []byte) (map[string]Tenant, []*Error) {
	s := &shape{data: data, offsets: map[string]int64{}}
	if e := s.check(); e != nil {
		return nil, []*Error{e}
	}
	var keys []string
	for path := range s.offsets {
		if path != "" && !strings.ContainsAny(path, ".[") {
			keys = append(keys, path)
		}
	}
	slices.Sort(keys)
	var errs []*Error
	for _, k := range keys {
		if k != "tenants" {
			e := s.errorAt(s.offsets[k], k, `only "tenants" belongs in a tenants_file (the rest of the configuration stays in the config file)`)
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var doc struct {
		Tenants map[string]Tenant `json:"tenants"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, []*Error{s.decodeError(err)}
	}
	ch := &checker{}
	ch.tenants("tenants", doc.Tenants, c.Limits, c.ToolOutput.MaxBytes)
	for _, e := range ch.errs {
		if off, ok := s.locate(e.Path); ok {
			e.Line, e.Column = s.position(off)
		}
	}
	if len(ch.errs) > 0 {
		return nil, ch.errs
	}
	if doc.Tenants == nil {
		doc.Tenants = map[string]Tenant{}
	}
	return doc.Tenants, nil
}

// resolveTenantsFile makes a relative TenantsFile relative to the directory
// of the config file at path.
func (c *Config) resolveTenantsFile(path string) {
	if c.TenantsFile != "" && !filepath.IsAbs(c.TenantsFile) {
		c.TenantsFile = filepath.Join(filepath.Dir(path), c.TenantsFile)
	}
}

// Digest is the SHA-256 a token is compared by: of Token when given in the
// clear, else TokenSHA256 decoded. ok is false for a token with neither (a
// Config that was not validated).
func (t TenantToken) Digest() (digest [sha256.Size]byte, ok bool) {
	if t.Token != "" {
		return sha256.Sum256([]byte(t.Token)), true
	}
	b, err := hex.DecodeString(t.TokenSHA256)
	if err != nil || len(b) != sha256.Size {
		return digest, false
	}
	copy(digest[:], b)
	return digest, true
}
