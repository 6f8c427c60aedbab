package cluster_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/callsheet/callsheet/cluster"
)

// TestEmbeddedRefusesOtherClients: the embedded server admits its
// credentials only, over TCP and in-process alike; nothing else reaches
// JetStream.
func TestEmbeddedRefusesOtherClients(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _ := other.PublicKey()
	// The group returns once its parallel cases have.
	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			opts []nats.Option
		}{
			// In-process, the server's refusal reaches the client as a
			// closed pipe (at times only after the server's write
			// deadline), not as the -ERR line.
			{"anonymous TCP", nil},
			{"anonymous in-process", []nats.Option{nats.InProcessServer(e.Server())}},
			{"another nkey over TCP", []nats.Option{nats.Nkey(otherPub, other.Sign)}},
			{"another nkey in-process", []nats.Option{nats.InProcessServer(e.Server()), nats.Nkey(otherPub, other.Sign)}},
			{"the right public key, signed by another seed", []nats.Option{nats.Nkey(e.Credentials().PublicKey(), other.Sign)}},
			{"user and password", []nats.Option{nats.UserInfo("callsheet", "callsheet")}},
			{"token", []nats.Option{nats.Token("callsheet")}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				nc, err := nats.Connect(e.ClientURL(), append([]nats.Option{nats.MaxReconnects(0), nats.Timeout(5 * time.Second)}, tc.opts...)...)
				if err == nil {
					nc.Close()
					t.Fatal("connected, want a refusal")
				}
				if !cluster.RefusedCredentials(err) && !strings.Contains(tc.name, "in-process") {
					t.Fatalf("err=%v, want an authorization violation", err)
				}
			})
		}
	})
	// The server's own credentials get in, over TCP and in-process, and
	// reach JetStream.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tcp, err := nats.Connect(e.ClientURL(), e.Credentials().Option())
	if err != nil {
		t.Fatalf("TCP with the server's credentials: %v", err)
	}
	defer tcp.Close()
	in, err := e.Connect("test")
	if err != nil {
		t.Fatalf("in-process: %v", err)
	}
	defer in.Close()
	for _, nc := range []*nats.Conn{tcp, in} {
		js, _ := jetstream.New(nc)
		if _, err := js.AccountInfo(ctx); err != nil {
			t.Fatalf("JetStream with the server's credentials: %v", err)
		}
	}
}

// TestConnectRefusedCredentials: Connect to a server that refuses the
// credentials fails at once, saying what to give, rather than retrying in
// silence; with them it connects.
func TestConnectRefusedCredentials(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	begin := time.Now()
	_, err := cluster.Connect(e.ClientURL(), "test")
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "--nats-creds") {
		t.Fatalf("Connect without credentials: err=%v, want nats.ErrAuthorization naming --nats-creds", err)
	}
	if d := time.Since(begin); d > 20*time.Second {
		t.Fatalf("Connect without credentials took %s: it retried", d)
	}
	nc, err := cluster.Connect(e.ClientURL(), "test", e.Credentials().Option())
	if err != nil {
		t.Fatalf("Connect with credentials: %v", err)
	}
	nc.Close()
}

// TestEmbeddedSharedCredentials: two servers given one credentials file
// (as the nodes of a fleet would be) admit the same client.
func TestEmbeddedSharedCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.nk")
	creds, err := cluster.EnsureCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir(), Credentials: creds})
		c, err := cluster.LoadCredentials(path)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(e.ClientURL(), c.Option())
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		nc.Close()
	}
}

func TestEnsureCredentials(t *testing.T) {
	data := t.TempDir()
	path := cluster.DefaultCredentialsPath(data)
	if want := filepath.Join(data, "credentials", "nats.nk"); path != want {
		t.Fatalf("DefaultCredentialsPath=%s, want %s", path, want)
	}
	if _, err := cluster.LoadCredentials(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCredentials of a missing file: err=%v, want fs.ErrNotExist", err)
	}
	c, err := cluster.EnsureCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	if !nkeys.IsValidPublicUserKey(c.PublicKey()) || c.Path() != path || c.JWT() {
		t.Fatalf("credentials: public key %q path %q jwt %v", c.PublicKey(), c.Path(), c.JWT())
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", p, got, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("credentials dir holds %d entries, want only %s", len(entries), cluster.CredentialsFile)
	}
	again, err := cluster.EnsureCredentials(path)
	if err != nil || again.PublicKey() != c.PublicKey() {
		t.Fatalf("second EnsureCredentials: %v, public key %q, want the first's %q", err, again.PublicKey(), c.PublicKey())
	}
}

// TestEnsureCredentialsConcurrent: processes starting at once on a fresh
// data dir end up with one seed.
func TestEnsureCredentialsConcurrent(t *testing.T) {
	path := cluster.DefaultCredentialsPath(t.TempDir())
	keys := make([]string, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			c, err := cluster.EnsureCredentials(path)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = c.PublicKey()
		})
	}
	wg.Wait()
	for i, k := range keys {
		if k != keys[0] {
			t.Fatalf("caller %d got public key %q, caller 0 %q", i, k, keys[0])
		}
	}
}

func TestLoadCredentialsRefuses(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	dir := t.TempDir()
	file := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"readable by others", file("loose.nk", append(seed, '\n'), 0o644), "chmod 600"},
		{"group-readable", file("group.nk", append(seed, '\n'), 0o640), "chmod 600"},
		{"not a seed", file("garbage.nk", []byte("hello\n"), 0o600), "no nkey user seed"},
		{"an account seed", file("account.nk", append(acctSeed, '\n'), 0o600), "no nkey user seed"},
		{"a directory", dir, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cluster.LoadCredentials(tc.path)
			if !errors.Is(err, cluster.ErrCredentials) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("err=%v, want ErrCredentials naming %s and holding %q", err, tc.path, tc.want)
			}
			if strings.Contains(err.Error(), string(seed)) {
				t.Fatalf("the error echoes the seed: %v", err)
			}
		})
	}
	// A file with mode 0600 that is not in the embedded server's form of
	// credentials: a decorated seed loads, a .creds file loads but is
	// refused by the embedded server.
	decorated := file("decorated.nk", []byte("-----BEGIN USER NKEY SEED-----\n"+string(seed)+"\n------END USER NKEY SEED------\n"), 0o600)
	if c, err := cluster.LoadCredentials(decorated); err != nil || c.JWT() {
		t.Fatalf("decorated seed: %v", err)
	}
	creds := file("user.creds", []byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.sig\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n"+string(seed)+"\n------END USER NKEY SEED------\n"), 0o600)
	c, err := cluster.LoadCredentials(creds)
	if err != nil || !c.JWT() {
		t.Fatalf(".creds file: %v (jwt %v)", err, c != nil && c.JWT())
	}
	if _, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: t.TempDir(), Credentials: c}); !errors.Is(err, cluster.ErrInvalidOption) {
		t.Fatalf("embedded server with JWT credentials: err=%v, want ErrInvalidOption", err)
	}
}

// FuzzLoadCredentials: no file content makes LoadCredentials panic, and
// whatever it accepts is a valid nkey user.
func FuzzLoadCredentials(f *testing.F) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	f.Add(append(seed, '\n'))
	f.Add([]byte("-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"))
	f.Add([]byte("-----BEGIN NATS USER JWT-----\nx.y.z\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"))
	f.Add([]byte("SUAAAA\n"))
	f.Add([]byte(""))
	f.Add([]byte("-----BEGIN NATS USER JWT-----\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "fuzz.nk")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := cluster.LoadCredentials(p)
		if err != nil {
			if !errors.Is(err, cluster.ErrCredentials) {
				t.Fatalf("err=%v, want ErrCredentials", err)
			}
			return
		}
		if !nkeys.IsValidPublicUserKey(c.PublicKey()) {
			t.Fatalf("accepted %q with public key %q", b, c.PublicKey())
		}
	})
}
