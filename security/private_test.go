package security

// Attacks by a tenant on the host's other users (docs/security.md "Sandbox",
// "Workspace"): nothing a sandboxed command leaves behind gives a local user
// a way into a tenant's files, and tenants' commands run as different uids.

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/sandbox"
)

// openDataDir returns a data dir whose parent any user may search, so that
// only the modes the node gives what it creates stand between a local user
// and the workspaces (t.TempDir's directories are 0700).
func openDataDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "callsheet-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	return filepath.Join(base, "data")
}

// asNobody runs script with sh as uid 65534 and returns its output.
func asNobody(t *testing.T, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestSandboxLeavesNoSetuidFile: a tenant's shell tries every way to leave
// a setuid or setgid file in its workspace (chmod, install, an open that
// creates one, cp -p and tar -p of a setuid program, a setgid directory):
// on the host no file of the workspace carries either bit.
func TestSandboxLeavesNoSetuidFile(t *testing.T) {
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: openDataDir(t), Config: twoTenants(nil)})
	s := mustOpen(t, p, acmeToken, "w")
	out, txt := shellAs(t, p, acmeToken, s, `cp /bin/bash sb1; chmod 4755 sb1; chmod u+s sb1
cp /bin/bash sb2; chmod g+s sb2; perl -e 'chmod 06755, "sb2"'
install -m 6755 /bin/bash sb3
perl -e 'use Fcntl; sysopen(F, "sb4", O_CREAT|O_WRONLY, 06755) or print "sysopen: $!\n"'
setuid=$(find /usr/bin /bin -perm -4000 -type f 2>/dev/null | head -1); echo "a setuid program: $setuid"
cp -p "$setuid" sb5; tar -C "$(dirname "$setuid")" -cf - "$(basename "$setuid")" | tar -xpf - -C . 
mkdir -m 2775 sgid; mkdir sgid2; chmod g+s sgid2
find . -perm /6000 -printf "inside: %m %p\n"; echo finished`, 30*time.Second)
	if !strings.Contains(txt, "finished") {
		t.Fatalf("shell: %s %q", out, txt)
	}
	t.Logf("the shell's attempts:\n%s", txt)
	var found []string
	filepath.WalkDir(wsDir(p, "acme", "w"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := os.Lstat(path)
		if err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			found = append(found, fmt.Sprintf("%s %v", path, fi.Mode()))
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("the sandboxed shell left setuid or setgid files on the host:\n%s\nits output:\n%s", strings.Join(found, "\n"), txt)
	}
}

// TestWorkspacesArePrivateToTheNode: a local user (uid 65534) cannot reach
// the workspace root, a tenant's directory or a workspace, so nothing a
// session leaves there is theirs to run or read; a call's private /tmp
// leaves nothing on the host, even when the node is killed with SIGKILL
// mid-call.
func TestWorkspacesArePrivateToTheNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the suite does not run as root: no other local user to try as")
	}
	data := openDataDir(t)
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: data, Config: twoTenants(nil)})
	s := mustOpen(t, p, acmeToken, "w")
	shellOK(t, p, acmeToken, s, "echo acme-file > f.txt")
	root := filepath.Join(data, "workspaces")
	got := asNobody(t, `for d in "$@"; do ls "$d" >/dev/null 2>&1 && echo "listed $d"; cat "$d/f.txt" 2>/dev/null; done; true`,
		root, filepath.Join(root, "acme"), filepath.Join(root, "acme", "w"))
	if got != "" {
		t.Errorf("a local user reaches the workspaces:\n%s", got)
	}

	// A background call writes its private /tmp; the node dies with SIGKILL.
	mark := fmt.Sprintf("private-tmp-%d", rand.Int64())
	sleep := marker()
	body := map[string]any{"calls": []any{map[string]any{"id": "bg", "name": "shell", "arguments": map[string]any{
		"command": "echo secret > /tmp/" + mark + " && echo started > started && sleep " + sleep, "background": true, "timeout_ms": 60000}}}}
	if code, err := p.DoAs(acmeToken, "POST", "/v1/sessions/"+s+"/turns", body, nil); err != nil || code != 200 {
		t.Fatalf("background call: %d %v", code, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(wsDir(p, "acme", "w"), "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background call did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Kill()
	waitGone(sleep)
	var left []string
	for _, dir := range []string{os.TempDir(), data} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == mark {
				left = append(left, path)
			}
			return nil
		})
	}
	if len(left) > 0 {
		t.Errorf("a killed call's private /tmp stayed on the host: %v", left)
	}
	if n := len(procs.Marked(sleep)); n > 0 {
		t.Errorf("%d processes of the killed call live on", n)
	}
}

// TestTenantsRunAsTheirOwnUIDs: on a root node each tenant's commands run
// as a uid of its own, the one docs/spec.md §10 derives from the tenant's
// name, and its workspaces belong to that uid.
func TestTenantsRunAsTheirOwnUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root node runs commands as other uids")
	}
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: twoTenants(nil)})
	uids := map[string]int{}
	for tenant, token := range map[string]string{"acme": acmeToken, "umbrella": umbrellaToken} {
		s := mustOpen(t, p, token, "w")
		_, txt := shellAs(t, p, token, s, "id -u; id -g", 10*time.Second)
		f := strings.Fields(txt)
		uid, _ := strconv.Atoi(f[0])
		want, wantGID := sandbox.Config{}.IDs(tenant)
		if uid != want || f[1] != strconv.Itoa(wantGID) {
			t.Errorf("tenant %s runs as %q, want uid %d, gid %d", tenant, txt, want, wantGID)
		}
		fi, err := os.Stat(wsDir(p, tenant, "w"))
		if err != nil {
			t.Fatal(err)
		}
		if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != want {
			t.Errorf("tenant %s's workspace belongs to uid %d, want %d", tenant, owner, want)
		}
		uids[tenant] = uid
	}
	if uids["acme"] == uids["umbrella"] {
		t.Errorf("both tenants run as uid %d", uids["acme"])
	}
}
