package api

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/node"
)

// TestTenantsFileReload: a token removed from the tenants_file is 401 as
// soon as the node has read the file again (ReloadTenants, as SIGHUP
// does), while requests of every token run concurrently (go test -race);
// a token that stays is never refused.
func TestTenantsFileReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants.json")
	write := func(doc string) {
		if err := os.WriteFile(file+".tmp", []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	both := `{"tenants": {"acme": {"tokens": [{"token": "keep"}, {"token": "gone", "principal": "p2"}]}}}`
	write(both)
	cfg := config.DefaultConfig()
	cfg.TenantsFile = file
	e := newEnv(t, &cfg)
	var stop atomic.Bool
	var keepFailed atomic.Int64
	var wg sync.WaitGroup
	for _, tok := range []string{"keep", "gone", "keep", "gone"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sessions", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if tok == "keep" && resp.StatusCode != http.StatusOK {
					keepFailed.Add(1)
				}
			}
		}()
	}
	for range 5 {
		write(`{"tenants": {"acme": {"tokens": [{"token": "keep"}]}}}`)
		if err := e.node.ReloadTenants(); err != nil {
			t.Fatal(err)
		}
		e.token = "gone"
		status, b := e.do("GET", "/v1/sessions", "")
		wantError(t, status, b, http.StatusUnauthorized, CodeUnauthorized, "matches no tenant")
		write(both)
		if err := e.node.ReloadTenants(); err != nil {
			t.Fatal(err)
		}
		e.must("GET", "/v1/sessions", "", http.StatusOK, nil)
	}
	// A broken file changes nothing and says why, also to a SIGHUP after
	// the node's own look read it.
	write(`{"tenants": {"acme": {"tokens": [{"tokn": "x"}]}}}`)
	time.Sleep(node.TenantsPoll + 500*time.Millisecond)
	if err := e.node.ReloadTenants(); err == nil {
		t.Fatal("a broken file was put in force")
	}
	e.must("GET", "/v1/sessions", "", http.StatusOK, nil)
	stop.Store(true)
	wg.Wait()
	if n := keepFailed.Load(); n > 0 {
		t.Fatalf("%d requests of the token that stayed were refused", n)
	}
	if v := e.node.Tenants().Version; v != 11 {
		t.Fatalf("version %d, want 11 (10 reloads in force, the broken one not)", v)
	}
}
