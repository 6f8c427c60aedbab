package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorListener: --metrics-listen serves /metrics, /healthz and
// /readyz without a token on a node with tenants, whose API refuses
// /metrics to a tenant; the scrape holds the state families (lease held,
// MCP servers up and restarted).
func TestOperatorListener(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "callsheet.json")
	if err := os.WriteFile(cfg, []byte(`{"tenants": {"acme": {"token": "acme-tok"}},
		"mcp_servers": {"broken": {"command": ["/bin/false"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := runMain(t, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
	if m.MetricsAddr() == "" || strings.HasSuffix(m.MetricsAddr(), ":0") {
		t.Fatalf("MetricsAddr()=%q", m.MetricsAddr())
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ops := "http://" + m.MetricsAddr()
	if code, body := get(ops + "/readyz"); code != http.StatusOK || !strings.Contains(body, `"ready"`) {
		t.Errorf("readyz: %d %s", code, body)
	}
	if code, _ := get(ops + "/healthz"); code != http.StatusOK {
		t.Errorf("healthz: %d", code)
	}
	req, _ := http.NewRequest("GET", "http://"+m.Addr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer acme-tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a tenant's GET /metrics on the API: %d, want 404", resp.StatusCode)
	}
	code, body := get(ops + "/metrics")
	for _, want := range []string{"callsheet_lease_held 1", `callsheet_mcp_server_up{server="broken"} 0`, `callsheet_mcp_server_restarts_total{server="broken"} 0`, `callsheet_http_requests_total{code="4xx",method="GET",route="/metrics"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("operator's /metrics lacks %q", want)
		}
	}
	if code != http.StatusOK {
		t.Errorf("metrics: %d", code)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(ops + "/healthz"); err == nil {
		t.Errorf("the operator's listener still answers after Close")
	}
}
