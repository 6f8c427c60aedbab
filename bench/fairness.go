package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
)

// Tokens of the fairness benchmark's tenants: a reads while b burns CPU.
const (
	fairReader = "bench-token-a"
	fairBurner = "bench-token-b"
)

// benchCPUFairness times tenant A's one-call `read` turns over HTTP to a
// node process (cmd/callsheet-node) while tenant B's background shells each spin a
// CPU: on a node whose sandboxes are in cgroups (each tenant its own, with
// equal CPU weight; the node its own, ten times that) and on one with
// sandbox.cgroups "off", where B's spinners compete with the node's own
// threads one for one (docs/security.md "Resources"); the floor is the same
// reads with nothing spinning.
func benchCPUFairness(ctx context.Context, s *suite) ([]sample, error) {
	burners, reads := 64, max(s.cfg.Calls/5, 20)
	if s.cfg.Calls < 1000 {
		burners = max(2, s.cfg.Calls/4)
	}
	dir, bin, err := buildNode(ctx, "csbench-fairness-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rg, err := ripgrep()
	if err != nil {
		return nil, err
	}
	run := func(name, cgroups string, burn bool) (time.Duration, error) {
		cfg := map[string]any{
			"durability": config.DurabilityInterval,
			"tenants": map[string]any{
				"a": map[string]any{"token": fairReader},
				"b": map[string]any{"token": fairBurner},
			},
			"sandbox": map[string]any{"cgroups": cgroups},
		}
		raw, _ := json.Marshal(cfg)
		cfgPath := filepath.Join(dir, name+".json")
		if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
			return 0, err
		}
		p, err := startProc(ctx, bin, []string{"CALLSHEET_RG=" + rg}, "--data", filepath.Join(dir, name), "--http", "127.0.0.1:0", "--config", cfgPath)
		if err != nil {
			return 0, err
		}
		defer p.kill()
		open := func(token string) (string, error) {
			code, b, err := p.as(ctx, token, http.MethodPost, "/v1/sessions", `{}`)
			var out struct{ Session string }
			if err == nil && code == http.StatusCreated {
				err = json.Unmarshal([]byte(b), &out)
			} else if err == nil {
				err = fmt.Errorf("open a session: %d %s", code, b)
			}
			return out.Session, err
		}
		turn := func(token, session, name, args string) error {
			body := fmt.Sprintf(`{"calls": [{"id": "c1", "name": %q, "arguments": %s}]}`, name, args)
			code, b, err := p.as(ctx, token, http.MethodPost, "/v1/sessions/"+session+"/turns", body)
			if err == nil && (code != http.StatusOK || !strings.Contains(b, `"outcome":"ok"`)) {
				err = fmt.Errorf("%s turn: %d %s", name, code, b)
			}
			return err
		}
		a, err := open(fairReader)
		if err != nil {
			return 0, err
		}
		if err := turn(fairReader, a, "write", `{"path": "f.txt", "content": "a line\n"}`); err != nil {
			return 0, err
		}
		if burn {
			spin := fmt.Sprintf(`{"command": "timeout %d sh -c 'while :; do :; done'", "background": true}`, 15+reads/4)
			for range burners {
				b, err := open(fairBurner)
				if err != nil {
					return 0, err
				}
				if err := turn(fairBurner, b, "shell", spin); err != nil {
					return 0, err
				}
			}
			time.Sleep(2 * time.Second) // every spinner on a CPU
		}
		for range 10 { // warm
			if err := turn(fairReader, a, "read", `{"path": "f.txt"}`); err != nil {
				return 0, err
			}
		}
		lat := make([]time.Duration, reads)
		for i := range lat {
			start := time.Now()
			if err := turn(fairReader, a, "read", `{"path": "f.txt"}`); err != nil {
				return 0, err
			}
			lat[i] = time.Since(start)
		}
		slices.Sort(lat)
		return percentile(lat, 50), nil
	}
	idle, err := run("idle", config.SandboxCgroupsAuto, false)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	with, err := run("cgroups", config.SandboxCgroupsAuto, true)
	if err != nil {
		return nil, fmt.Errorf("with cgroups: %w", err)
	}
	without, err := run("nocgroups", config.SandboxCgroupsOff, true)
	if err != nil {
		return nil, fmt.Errorf("without cgroups: %w", err)
	}
	cond := fmt.Sprintf("a node process (cmd/callsheet-node, interval) over HTTP; tenant A's one-call turns of read (a 7-byte file), %d timed, one at a time, while tenant B's %d background shells each spin a CPU; floor: the same reads with nothing spinning", reads, burners)
	return []sample{
		{name: "fairness/cpu/read/p50", value: us(with), unit: "µs", better: Lower, floor: us(idle), conditions: cond + "; sandbox cgroups on (where the node can make them: root)"},
		{name: "fairness/cpu/read/p50-without-cgroups", value: us(without), unit: "µs", better: Lower, floor: us(idle), conditions: cond + `; sandbox.cgroups "off"`},
	}, nil
}

// as is do with a bearer token and a 60 s bound.
func (p *benchProc) as(ctx context.Context, token, method, path, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// buildNode builds cmd/callsheet-node into a new temporary directory named
// for pattern; the caller removes dir.
func buildNode(ctx context.Context, pattern string) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", pattern); err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "callsheet-node")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/callsheet/callsheet/cmd/callsheet-node").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("build cmd/callsheet-node: %v\n%s", err, out)
	}
	return dir, bin, nil
}
