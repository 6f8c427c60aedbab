package security

// Attacks on what the sandbox hides (docs/security.md "Sandbox", the mount
// layer): the node's config, data dir and credentials are absent from a
// sandboxed command's view by what they are, whatever names lead to them,
// and the descriptors the node's own parent left open never reach it.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/callsheet/callsheet/internal/testnode"
)

// configMapLayout makes, in a directory the sandbox shows (sandbox.read_only),
// the layout Kubernetes gives a mounted ConfigMap: the files in a
// timestamped directory, "..data" a link to it, and each name a link
// through "..data". The node's config (cfg, with sandbox.read_only set to
// the shown directory) is cfg.json there, and its data dir the link "data"
// to a directory beside the config. It returns the shown directory, the
// config's path and the data dir's (both links).
func configMapLayout(t *testing.T, cfg map[string]any, owner *syscall.Credential) (shown, config, data string) {
	t.Helper()
	base, err := os.MkdirTemp("", "callsheet-configmap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	shown = filepath.Join(base, "shown")
	stamp := filepath.Join(shown, "..2026_12_01_09_00_00.000000000")
	if err := os.MkdirAll(filepath.Join(stamp, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg["sandbox"] = map[string]any{"read_only": []string{shown}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(stamp, "cfg.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"..data": filepath.Base(stamp), "cfg.json": "..data/cfg.json", "data": "..data/state"} {
		if err := os.Symlink(target, filepath.Join(shown, link)); err != nil {
			t.Fatal(err)
		}
	}
	if owner != nil {
		for _, p := range []string{filepath.Join(stamp, "state"), filepath.Join(stamp, "cfg.json")} {
			os.Chown(p, int(owner.Uid), int(owner.Gid))
		}
	}
	return shown, filepath.Join(shown, "cfg.json"), filepath.Join(shown, "data")
}

// TestHiddenPathsBehindSymlinks: with --config and --data links in a
// directory the sandbox shows (a Kubernetes ConfigMap's layout), a tenant's
// shell reads everything there and finds no token, no other tenant's file,
// no credential and no signing key: the links' targets are hidden, not only
// the links. Run with a root node and with one that is not root (whose
// sandboxed commands run as its own uid, so only absence protects the
// credentials).
func TestHiddenPathsBehindSymlinks(t *testing.T) {
	for _, asRoot := range []bool{true, false} {
		name := map[bool]string{true: "root node", false: "node that is not root"}[asRoot]
		t.Run(name, func(t *testing.T) {
			if asRoot && os.Geteuid() != 0 {
				t.Skip("the suite does not run as root")
			}
			secret := fmt.Sprintf("UMBRELLA-SECRET-%d", rand.Int64())
			cfg := twoTenants(nil)
			var (
				bin = testnode.Node(t, "")
				o   testnode.Options
			)
			if !asRoot && os.Geteuid() == 0 {
				bin, o = unprivileged(t, nil)
			}
			shown, config, data := configMapLayout(t, cfg, o.Credential)
			o.Data, o.Config = data, config
			p := testnode.Start(t, bin, o)
			u := mustOpen(t, p, umbrellaToken, "vault")
			turnAs(t, p, umbrellaToken, u, []map[string]any{one("w", "write", map[string]any{"path": "secret.txt", "content": secret})})
			a := mustOpen(t, p, acmeToken, "")
			tv := turnAs(t, p, acmeToken, a, []map[string]any{one("sh", "shell", map[string]any{"command": `set -- ` + shown + `
find "$1" 2>&1 | head -50
find "$1" -type f -exec sh -c 'echo "== $1"; head -c 2000 "$1"; echo' sh {} \; 2>&1 | head -c 200000`})})
			out := text(tv.Results[0])
			for what, leak := range map[string]string{"umbrella's token": umbrellaToken, "umbrella's file": secret,
				"a signing key": "PRIVATE KEY", "the NATS seed (nats.nk)": "nats.nk", "the JetStream store": "jetstream"} {
				if strings.Contains(out, leak) {
					t.Errorf("acme's shell sees %s (%q) through the links' targets:\n%s", what, leak, tail(out, 4000))
				}
			}
			if !strings.Contains(out, "..data") {
				t.Errorf("the shown directory is not shown at all, so this test proves nothing:\n%s", out)
			}
		})
	}
}

// TestInheritedDescriptorsStayOutOfTheSandbox: the node's parent left
// descriptors open (a root-only file for reading on 7, a host file for
// appending on 8); a sandboxed shell can use neither, nor see them on the
// sandbox's init.
func TestInheritedDescriptorsStayOutOfTheSandbox(t *testing.T) {
	dir := t.TempDir()
	secret := fmt.Sprintf("ROOT-ONLY-%d", rand.Int64())
	private := filepath.Join(dir, "private")
	if err := os.WriteFile(private, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "host.log")
	if err := os.WriteFile(log, []byte("host log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var extra []*os.File
	for range 4 { // descriptors 3..6
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		extra = append(extra, f)
	}
	r, err := os.Open(private)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(dir, "data"), ExtraFiles: append(extra, r, w)})
	s := open(t, p, "")
	out := shellText(t, p, s, `cat <&7 2>&1; echo PWNED >&8 2>&1; ls -l /proc/self/fd; ls -l /proc/1/fd 2>&1; echo done`)
	if strings.Contains(out, secret) {
		t.Errorf("the sandbox read the root-only file on descriptor 7:\n%s", out)
	}
	if b, _ := os.ReadFile(log); string(b) != "host log\n" {
		t.Errorf("the sandbox appended to the host file on descriptor 8: %q\n%s", b, out)
	}
	if strings.Contains(out, private) || strings.Contains(out, log) {
		t.Errorf("the sandbox sees the inherited descriptors:\n%s", out)
	}
}
