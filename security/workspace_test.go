package security

// The workspace boundary (docs/spec.md §10 "Workspace", docs/security.md
// "Workspace"): every path a file tool, checkpoint, rewind or workspace name
// uses resolves beneath the workspace, without following a symbolic link out
// and without a check-then-use race, and a workspace name never traverses a
// symbolic link. Each test below attacks one class the way a hostile session
// would: with links its own shell made, and with a background shell racing
// the node.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// wsDir is the directory of workspace name under tenant on p (the node's
// default workspace root, DATA/workspaces/TENANT/NAME).
func wsDir(p *testnode.Proc, tenant, name string) string {
	return filepath.Join(p.Data, "workspaces", tenant, filepath.FromSlash(name))
}

// openAs asks p, with token, for a session on workspace name; it returns the
// status and the raw answer, so a test can insist on a refusal.
func openAs(t *testing.T, p *testnode.Proc, token, name string) (int, []byte) {
	t.Helper()
	return openWith(t, p, token, map[string]any{"workspace": name})
}

// openWith posts body to /v1/sessions with token.
func openWith(t *testing.T, p *testnode.Proc, token string, body map[string]any) (int, []byte) {
	t.Helper()
	var raw []byte
	code, err := p.DoAs(token, "POST", "/v1/sessions", body, &raw)
	if err != nil {
		t.Fatalf("open session %v: %v", body, err)
	}
	return code, raw
}

// mustOpen opens a session on workspace name with token and returns its id.
func mustOpen(t *testing.T, p *testnode.Proc, token, name string) string {
	t.Helper()
	code, raw := openAs(t, p, token, name)
	if code != http.StatusCreated {
		t.Fatalf("open session on %q: %d %s", name, code, raw)
	}
	var out struct{ Session string }
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Session
}

// turnAs runs calls as one turn of session with token and returns the
// committed turn.
func turnAs(t *testing.T, p *testnode.Proc, token, session string, calls []map[string]any) projections.Turn {
	t.Helper()
	var tv projections.Turn
	code, err := p.DoAs(token, "POST", "/v1/sessions/"+session+"/turns", map[string]any{"calls": calls}, &tv)
	if err != nil || code != http.StatusOK || len(tv.Results) != len(calls) {
		t.Fatalf("turn of %d calls: %d %v %+v", len(calls), code, err, tv)
	}
	return tv
}

// one is a call with a fresh id.
func one(id, name string, args any) map[string]any {
	return map[string]any{"id": id, "name": name, "arguments": args}
}

// text is a result's parts as one string.
func text(r events.Result) string {
	var b strings.Builder
	for _, p := range r.Content {
		b.WriteString(p.Text)
		b.Write(p.JSON)
	}
	return b.String()
}

// shellOK runs command in session's workspace and fails the test unless it
// exits 0.
func shellOK(t *testing.T, p *testnode.Proc, token, session, command string) {
	t.Helper()
	tv := turnAs(t, p, token, session, []map[string]any{one("sh", "shell", map[string]any{"command": command})})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(text(r), "exit code 0") {
		t.Fatalf("shell %q: %s %s", command, r.Outcome, text(r))
	}
}

// outsideDir makes a directory outside every workspace holding files whose
// contents name themselves, and returns it with a snapshot of its contents.
func outsideDir(t *testing.T, files map[string]string) (string, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, snapshot(t, dir)
}

// snapshot maps every file below dir to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameSnapshot fails the test when dir no longer holds exactly want: a
// file tool wrote, changed or removed something outside the workspace.
func sameSnapshot(t *testing.T, what, dir string, want map[string]string) {
	t.Helper()
	if changed := diff(t, dir, want); len(changed) > 0 {
		t.Errorf("%s: outside the workspace, %s", what, strings.Join(changed, "; "))
	}
}

// leaked reports which of secrets r shows.
func leaked(r events.Result, secrets ...string) []string {
	var out []string
	for _, s := range secrets {
		if strings.Contains(text(r), s) {
			out = append(out, s)
		}
	}
	return out
}

// TestWorkspaceNameThroughSymlink: a session makes links in its workspace
// and names them, or a path through them, as a new session's workspace: to
// "/", to another session's workspace (by a relative and by an absolute
// link). Every such name is refused, and nothing is created behind a link.
func TestWorkspaceNameThroughSymlink(t *testing.T) {
	p := node(t, nil)
	victim := mustOpen(t, p, "", "w2")
	turnAs(t, p, "", victim, []map[string]any{one("w", "write", map[string]any{"path": "secret.txt", "content": "B-SECRET"})})
	attacker := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", attacker, `ln -s / root-link && ln -s ../w2 peer-link && ln -s "$(cd .. && pwd)/w2" peer-abs && mkdir real && ln -s real/.. up-link`)

	for _, name := range []string{"w1/root-link", "w1/peer-link", "w1/peer-abs", "w1/peer-link/deeper", "w1/root-link/tmp", "w1/up-link"} {
		t.Run(name, func(t *testing.T) {
			code, raw := openAs(t, p, "", name)
			if code == http.StatusCreated {
				var out struct{ Session string }
				_ = json.Unmarshal(raw, &out)
				// Show what the breach reaches.
				tv := turnAs(t, p, "", out.Session, []map[string]any{
					one("r1", "read", map[string]any{"path": "secret.txt"}),
					one("r2", "read", map[string]any{"path": "etc/passwd"}),
				})
				t.Fatalf("workspace %q through a symbolic link was opened (%s); its session reads: %q, %q", name, raw, text(tv.Results[0]), text(tv.Results[1]))
			}
			if code != http.StatusBadRequest || !strings.Contains(string(raw), "symbolic link") {
				t.Fatalf("open %q: %d %s; want 400 naming the symbolic link", name, code, raw)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(wsDir(p, "default", "w2"), "deeper")); err == nil {
		t.Errorf("opening w1/peer-link/deeper created w2/deeper, inside another session's workspace")
	}
	// The legitimate forms still work: a nested real directory, and a name
	// that merely looks odd.
	mustOpen(t, p, "", "w1/real")
	mustOpen(t, p, "", "w1/real/new.dir-x_y")
}

// TestWorkspaceNameIntoAnotherTenant: with two tenants, a link in one
// tenant's workspace to the other tenant's root (or a workspace in it) does
// not make the other tenant's files a workspace of the first.
func TestWorkspaceNameIntoAnotherTenant(t *testing.T) {
	const acme, umbrella = "tok-acme-1", "tok-umbrella-1"
	p := node(t, map[string]any{"tenants": map[string]any{
		"acme":     map[string]any{"token": acme},
		"umbrella": map[string]any{"token": umbrella},
	}})
	victim := mustOpen(t, p, umbrella, "vault")
	turnAs(t, p, umbrella, victim, []map[string]any{one("w", "write", map[string]any{"path": "secret.txt", "content": "UMBRELLA-SECRET"})})
	attacker := mustOpen(t, p, acme, "w1")
	shellOK(t, p, acme, attacker, `ln -s ../../umbrella tenant-link && ln -s ../../umbrella/vault vault-link && ln -s "$(cd ../.. && pwd)/umbrella" tenant-abs`)

	for _, name := range []string{"w1/tenant-link", "w1/vault-link", "w1/tenant-abs", "w1/tenant-link/vault"} {
		t.Run(name, func(t *testing.T) {
			code, raw := openAs(t, p, acme, name)
			if code == http.StatusCreated {
				var out struct{ Session string }
				_ = json.Unmarshal(raw, &out)
				tv := turnAs(t, p, acme, out.Session, []map[string]any{
					one("r1", "read", map[string]any{"path": "vault/secret.txt"}),
					one("r2", "read", map[string]any{"path": "secret.txt"}),
				})
				t.Fatalf("tenant acme opened %q, a link into tenant umbrella (%s); it reads: %q, %q", name, raw, text(tv.Results[0]), text(tv.Results[1]))
			}
			if code != http.StatusBadRequest || !strings.Contains(string(raw), "symbolic link") {
				t.Fatalf("open %q: %d %s; want 400 naming the symbolic link", name, code, raw)
			}
		})
	}
	// Tenants' roots are apart: the same name is a different directory.
	other := mustOpen(t, p, acme, "vault")
	tv := turnAs(t, p, acme, other, []map[string]any{one("r", "read", map[string]any{"path": "secret.txt"})})
	if got := leaked(tv.Results[0], "UMBRELLA-SECRET"); len(got) > 0 {
		t.Fatalf("acme's workspace vault shows umbrella's secret: %q", text(tv.Results[0]))
	}
}

// TestWorkspaceNestedNameSwap: session A owns w1; session B's workspace is
// w1/sub, a real directory when B opened it. A then swaps sub for a link
// (outside, and to another session's workspace). B's next calls must not
// follow it: they fail with an error naming the link, and nothing outside
// is read, written or checkpointed.
func TestWorkspaceNestedNameSwap(t *testing.T) {
	p := node(t, nil)
	out, before := outsideDir(t, map[string]string{"secret.txt": "OUTSIDE-SECRET\n"})
	owner := mustOpen(t, p, "", "w1")
	shellOK(t, p, "", owner, "mkdir sub")
	nested := mustOpen(t, p, "", "w1/sub")
	turnAs(t, p, "", nested, []map[string]any{one("w0", "write", map[string]any{"path": "secret.txt", "content": "inside\n"})})

	shellOK(t, p, "", owner, fmt.Sprintf("mv sub sub.real && ln -s %q sub", out))

	tv := turnAs(t, p, "", nested, []map[string]any{
		one("r", "read", map[string]any{"path": "secret.txt"}),
		one("l", "read", map[string]any{"path": "."}),
		one("w", "write", map[string]any{"path": "secret.txt", "content": "planted\n"}),
		one("n", "write", map[string]any{"path": "new.txt", "content": "planted\n"}),
		one("p", "apply_patch", map[string]any{"patch": "*** Begin Patch\n*** Add File: patched.txt\n+planted\n*** End Patch"}),
	})
	for _, r := range tv.Results {
		if got := leaked(r, "OUTSIDE-SECRET"); len(got) > 0 {
			t.Errorf("%s %s through the swapped nested workspace read outside: %q", r.ID, r.Name, text(r))
		}
		if r.Outcome == events.OutcomeOK {
			t.Errorf("%s %s ran in the swapped nested workspace: %s", r.ID, r.Name, text(r))
		} else if !strings.Contains(text(r), "symbolic link") {
			t.Errorf("%s %s: %q; want an error naming the symbolic link", r.ID, r.Name, text(r))
		}
	}
	sameSnapshot(t, "after the swap", out, before)
	checkpointsOf(t, p, nested, before)

	// A link to a sibling session's workspace is refused the same way.
	shellOK(t, p, "", owner, "rm sub && mkdir peer && ln -s peer sub")
	tv = turnAs(t, p, "", nested, []map[string]any{one("n2", "write", map[string]any{"path": "x.txt", "content": "planted\n"})})
	if r := tv.Results[0]; r.Outcome == events.OutcomeOK {
		t.Errorf("write through sub -> peer ran: %s", text(r))
	}
	if _, err := os.Lstat(filepath.Join(wsDir(p, "default", "w1"), "peer", "x.txt")); err == nil {
		t.Errorf("write in w1/sub landed in w1/peer through the link")
	}
	// Put back, the workspace works again.
	shellOK(t, p, "", owner, "rm sub && mv sub.real sub")
	tv = turnAs(t, p, "", nested, []map[string]any{one("r2", "read", map[string]any{"path": "secret.txt"})})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(text(r), "inside") {
		t.Errorf("read after the directory is back: %s %q", r.Outcome, text(r))
	}
}

// checkpointsOf fails the test when a FileCheckpointed of session recorded
// the content of a file outside (by its hash): a pre-image read through a
// link.
func checkpointsOf(t *testing.T, p *testnode.Proc, session string, outside map[string]string) int {
	t.Helper()
	evs, err := p.Events(session)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{}
	for name, body := range outside {
		sum := sha256.Sum256([]byte(body))
		bad[hex.EncodeToString(sum[:])] = name
	}
	n := 0
	for _, ev := range evs {
		if ev.Type != events.TypeFileCheckpointed {
			continue
		}
		n++
		var cp events.FileCheckpointed
		if err := json.Unmarshal(ev.Data, &cp); err != nil {
			t.Fatal(err)
		}
		if name, ok := bad[cp.SHA256]; ok {
			t.Errorf("checkpoint of %s holds the content of %s outside the workspace", cp.Path, name)
		}
	}
	return n
}

// racer starts a background shell in session that swaps the workspace's
// directory d with a link to out, as fast as it can, until the test ends
// (it stops when the file "stop" appears in the workspace, or after five
// minutes). On Linux x86_64 and arm64 the swap is one atomic
// renameat2(RENAME_EXCHANGE) of d and a link, so d is a link about half the
// time and never missing; elsewhere renames and a link. It pauses 1 ms every
// 200 swaps, so it takes about half a core.
func racer(t *testing.T, p *testnode.Proc, session, ws, out string) {
	t.Helper()
	nr := map[string]int{"amd64": 316, "arm64": 276}[runtime.GOARCH]
	script := fmt.Sprintf(`
my $nr = %d; my $end = time + 300;
symlink(%q, "l") or die "symlink: $!";
my ($d, $l) = ("d", "l"); # syscall wants variables, not literals
my $n = 0;
while (time < $end && ! -e "stop") {
  for (1..200) {
    if ($nr) { syscall($nr, -100, $d, -100, $l, 2) == 0 or die "renameat2: $!"; }
    else { rename("d", "d.real"); symlink(%q, "d"); unlink("d"); rename("d.real", "d"); }
    $n++;
  }
  select(undef, undef, undef, 0.001); # leave the machine's other core alone
}
print "swaps $n\n";
open(my $f, ">", "stopped") or die "stopped: $!"; close($f);`, nr, out, out)
	if err := os.WriteFile(filepath.Join(ws, "racer.pl"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stopped before the test's directories are removed: a swap during
	// the removal fails it (unlinkat: not a directory).
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws, "stopped")); err == nil {
				return
			}
		}
		t.Log("the racer did not say it stopped within 10 s")
	})
	tv := turnAs(t, p, "", session, []map[string]any{one("race", "shell", map[string]any{
		"command": "exec perl racer.pl", "background": true, "timeout_ms": 600000,
	})})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("starting the racer: %s", text(r))
	}
	// Wait until it swaps: d is a link at some moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fi, err := os.Lstat(filepath.Join(ws, "d")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the racer did not start swapping within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// raceRounds is how many turns the race tests hammer the swapped directory
// with (the race test: a quarter of them per tool). On the code before the
// fix (a check, then a plain open) every tool breached within its first
// three rounds, and a rewind within its first 15 tries; these are many
// times that.
const raceRounds = 48

// TestWorkspaceRaceSwap: a background shell keeps swapping a directory of
// the workspace for a link outside while read (files and listings), write,
// apply_patch and edit work on files in it, 16 calls a turn, one tool a
// turn. No call may read or change anything outside, and no checkpoint may
// hold an outside file's content.
func TestWorkspaceRaceSwap(t *testing.T) {
	// edit is outside the default surface: an agent that lists it.
	p := node(t, map[string]any{"agents": map[string]any{"editor": map[string]any{
		"tools": []string{"read", "write", "apply_patch", "edit", "shell"},
	}}})
	files := map[string]string{
		"secret.txt":     "OUTSIDE-SECRET\n",
		"u.txt":          "alpha\nOUTSIDE-U\n",
		"e.txt":          "alpha OUTSIDE-E\n",
		"outside-marker": "",
	}
	out, before := outsideDir(t, files)
	code, raw := openWith(t, p, "", map[string]any{"workspace": "w", "agent": "editor"})
	if code != http.StatusCreated {
		t.Fatalf("open session: %d %s", code, raw)
	}
	var opened struct{ Session string }
	if err := json.Unmarshal(raw, &opened); err != nil {
		t.Fatal(err)
	}
	s := opened.Session
	ws := wsDir(p, "default", "w")
	shellOK(t, p, "", s, `mkdir d && printf 'inside\n' > d/secret.txt && printf 'alpha\ninside\n' > d/u.txt && printf 'alpha inside\n' > d/e.txt`)
	racer(t, p, s, ws, out)

	secrets := []string{"OUTSIDE-SECRET", "OUTSIDE-U", "OUTSIDE-E", "outside-marker"}
	kinds := []string{"read", "write", "apply_patch", "edit"}
	ran, breached, refused := map[string]int{}, map[string][]string{}, map[string]string{}
	for round := range raceRounds {
		kind := kinds[round%len(kinds)]
		from, to := "alpha", "beta"
		if round/len(kinds)%2 == 1 {
			from, to = to, from
		}
		var calls []map[string]any
		for i := range 8 {
			switch kind {
			case "read":
				calls = append(calls,
					one(fmt.Sprintf("r%d", i), "read", map[string]any{"path": "d/secret.txt"}),
					one(fmt.Sprintf("l%d", i), "read", map[string]any{"path": "d"}))
			case "write":
				calls = append(calls,
					one(fmt.Sprintf("w%d", i), "write", map[string]any{"path": fmt.Sprintf("d/w-%d-%d.txt", round, i), "content": "planted\n"}),
					one(fmt.Sprintf("W%d", i), "write", map[string]any{"path": "d/secret.txt", "content": "inside\n"}))
			case "apply_patch":
				calls = append(calls,
					one(fmt.Sprintf("a%d", i), "apply_patch", map[string]any{"patch": fmt.Sprintf(
						"*** Begin Patch\n*** Add File: d/p-%d-%d.txt\n+planted\n*** End Patch", round, i)}),
					one(fmt.Sprintf("u%d", i), "apply_patch", map[string]any{"patch": fmt.Sprintf(
						"*** Begin Patch\n*** Update File: d/u.txt\n@@\n-%s\n+%s\n*** End Patch", from, to)}))
				from, to = to, from
			case "edit":
				calls = append(calls, one(fmt.Sprintf("e%d", i), "edit", map[string]any{"path": "d/e.txt", "old_string": from, "new_string": to}),
					one(fmt.Sprintf("E%d", i), "edit", map[string]any{"path": "d/e.txt", "old_string": to, "new_string": from}))
			}
		}
		tv := turnAs(t, p, "", s, calls)
		for _, r := range tv.Results {
			if got := leaked(r, secrets...); len(got) > 0 {
				breached[kind] = append(breached[kind], fmt.Sprintf("round %d: %s read outside: %q", round, r.ID, text(r)))
			}
			if r.Outcome == events.OutcomeOK {
				ran[r.Name]++
			} else if refused[r.Name] == "" {
				refused[r.Name] = string(r.Outcome) + " " + string(r.Block) + ": " + text(r)
			}
		}
		if changed := diff(t, out, before); len(changed) > 0 {
			breached[kind] = append(breached[kind], fmt.Sprintf("round %d: changed outside: %s", round, strings.Join(changed, "; ")))
			// Put the outside back, so the next rounds' tools are judged
			// on their own.
			if err := os.RemoveAll(out); err != nil {
				t.Fatal(err)
			}
			out2, _ := outsideDir(t, files)
			if err := os.Rename(out2, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := checkpointsOf(t, p, s, before)
	t.Logf("%d rounds; calls that ran ok: %v; %d checkpoints; a refusal of each: %q", raceRounds, ran, n, refused)
	for _, kind := range kinds {
		if len(breached[kind]) > 0 {
			t.Errorf("%s crossed the workspace boundary in %d rounds; first: %s", kind, len(breached[kind]), breached[kind][0])
		}
		if ran[kind] == 0 {
			t.Errorf("no %s call ran while the directory was swapped: the race was not exercised", kind)
		}
	}
}

// diff lists how dir differs from want.
func diff(t *testing.T, dir string, want map[string]string) []string {
	t.Helper()
	got := snapshot(t, dir)
	var out []string
	for name, body := range got {
		if w, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("%s appeared (%q)", name, body))
		} else if w != body {
			out = append(out, fmt.Sprintf("%s became %q", name, body))
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			out = append(out, name+" was removed")
		}
	}
	slices.Sort(out)
	return out
}

// TestWorkspaceRewindThroughSwap: a rewind restores and removes files in a
// directory that a background shell keeps swapping for a link outside. The
// rewind must not write or remove anything outside. Before the race, the
// same rewind through a link that stays in place is refused too.
func TestWorkspaceRewindThroughSwap(t *testing.T) {
	p := node(t, nil)
	out, before := outsideDir(t, map[string]string{"f.txt": "OUTSIDE-F\n", "g.txt": "OUTSIDE-G\n"})
	s := mustOpen(t, p, "", "w")
	ws := wsDir(p, "default", "w")
	shellOK(t, p, "", s, `mkdir d && printf 'g0\n' > d/g.txt`)
	// f1 creates d/f.txt (its pre-image: absent); g1 replaces d/g.txt (its
	// pre-image: g0). A rewind to f1 removes d/f.txt and writes g0 back.
	turnAs(t, p, "", s, []map[string]any{one("f1", "write", map[string]any{"path": "d/f.txt", "content": "f1\n"})})
	turnAs(t, p, "", s, []map[string]any{one("g1", "write", map[string]any{"path": "d/g.txt", "content": "g1\n"})})

	rewind := func() (int, string) {
		var raw []byte
		code, err := p.Do("POST", "/v1/sessions/"+s+"/rewind", map[string]any{"call": "f1"}, &raw)
		if err != nil {
			t.Fatal(err)
		}
		return code, string(raw)
	}

	// A link that stays: refused, outside untouched.
	shellOK(t, p, "", s, fmt.Sprintf("mv d d.real && ln -s %q d", out))
	if code, raw := rewind(); code == http.StatusOK {
		t.Errorf("rewind through d -> outside succeeded: %s", raw)
	}
	sameSnapshot(t, "rewind through a static link", out, before)
	shellOK(t, p, "", s, "rm d && mv d.real d")

	racer(t, p, s, ws, out)
	codes := map[int]int{}
	for i := range raceRounds * 4 {
		code, raw := rewind()
		if codes[code]++; codes[code] == 1 && code != http.StatusOK {
			t.Logf("rewind %d, the first answered %d: %s", i, code, raw)
		}
		sameSnapshot(t, fmt.Sprintf("rewind %d", i), out, before)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("rewinds by status: %v", codes)
	if codes[http.StatusInternalServerError] > 0 {
		t.Errorf("%d rewinds answered 500; a rewind refused because the workspace changed is a 409", codes[http.StatusInternalServerError])
	}
	if codes[http.StatusOK] == 0 {
		t.Errorf("no rewind succeeded while the directory was swapped: the race was not exercised (%v)", codes)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range snapshot(t, out) {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(names, []string{"f.txt", "g.txt"}) {
		t.Errorf("outside holds %v, want [f.txt g.txt]", names)
	}
}

// TestWorkspacePathsStayRelative: what the log records and the model sees
// of paths is workspace-relative, even when the call gave an absolute path
// inside the workspace: the node's layout (its data directory) never shows.
func TestWorkspacePathsStayRelative(t *testing.T) {
	p := node(t, nil)
	s := mustOpen(t, p, "", "w")
	abs := filepath.Join(wsDir(p, "default", "w"), "sub", "x.txt")
	tv := turnAs(t, p, "", s, []map[string]any{
		one("w", "write", map[string]any{"path": abs, "content": "x\n"}),
		one("r", "read", map[string]any{"path": abs}),
		one("m", "read", map[string]any{"path": filepath.Join(wsDir(p, "default", "w"), "missing.txt")}),
	})
	for _, r := range tv.Results {
		if strings.Contains(text(r), p.Data) {
			t.Errorf("%s shows the node's data directory: %q", r.ID, text(r))
		}
		for _, touched := range r.Touched {
			if touched != filepath.Join("sub", "x.txt") {
				t.Errorf("%s recorded touched path %q, want sub/x.txt", r.ID, touched)
			}
		}
	}
	if got := tv.Results[0].Touched; len(got) != 1 {
		t.Errorf("write recorded touched %q, want [sub/x.txt]", got)
	}
	evs, err := p.Events(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), p.Data) && ev.Type != events.TypeTurnReceived && ev.Type != events.TypeToolCallRequested {
			t.Errorf("event %s records the node's data directory: %s", ev.Type, ev.Data)
		}
	}
}
