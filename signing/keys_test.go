package signing_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/signing"
)

func TestEnsureCreatesOnceWithOwnerOnlyModes(t *testing.T) {
	data := t.TempDir()
	path := signing.DefaultKeyPath(data)
	// Several processes starting at once end up with one key.
	var wg sync.WaitGroup
	keys := make([]ed25519.PrivateKey, 8)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, _, err := signing.Ensure(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !k.Equal(keys[0]) {
			t.Fatal("concurrent Ensure made different keys")
		}
	}
	fi, _ := os.Stat(path)
	di, _ := os.Stat(filepath.Dir(path))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("key mode %v, directory mode %v; want 0600 and 0700", fi.Mode(), di.Mode())
	}
	k, created, err := signing.Ensure(path)
	if err != nil || created || !k.Equal(keys[0]) {
		t.Fatalf("second Ensure: created=%v err=%v", created, err)
	}
	pub, err := signing.LoadPublicKey(signing.PublicKeyPath(path))
	if err != nil || !pub.Equal(k.Public()) {
		t.Fatalf("public key file: %v", err)
	}
	if got := signing.PublicKeyPath(path); got != filepath.Join(data, "credentials", "signing.pub") {
		t.Fatalf("PublicKeyPath = %s", got)
	}
}

func TestLoadRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.key")
	if _, err := signing.Load(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, _, err := signing.Ensure(path); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o640)
	if _, err := signing.Load(path); !errors.Is(err, signing.ErrKey) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable key: %v", err)
	}
	os.Chmod(path, 0o600)
	pub := signing.PublicKeyPath(path)
	os.WriteFile(path, []byte("not a key"), 0o600)
	if _, err := signing.Load(path); !errors.Is(err, signing.ErrKey) || !strings.Contains(err.Error(), "openssl genpkey -algorithm ed25519") {
		t.Fatalf("garbage key: %v", err)
	}
	// The private key given where the public one is expected is refused,
	// with a reason.
	priv := filepath.Join(dir, "p.key")
	signing.Ensure(priv)
	if _, err := signing.LoadPublicKey(priv); !errors.Is(err, signing.ErrKey) || !strings.Contains(err.Error(), "never the private key") {
		t.Fatalf("private key as public: %v", err)
	}
	if _, err := signing.LoadPublicKey(pub); err != nil {
		t.Fatal(err)
	}
}

// TestOpenSSLInterop: a key openssl makes is one a node can use, and a
// head signature the node makes is one openssl verifies with signing.pub.
func TestOpenSSLInterop(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is not on PATH: run scripts/ensure-openssl (%v)", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.key")
	if out, err := exec.Command(openssl, "genpkey", "-algorithm", "ed25519", "-out", path).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey: %v\n%s", err, out)
	}
	os.Chmod(path, 0o600)
	key, created, err := signing.Ensure(path)
	if err != nil || created {
		t.Fatalf("Ensure of openssl's key: created=%v %v", created, err)
	}
	p := events.SignHead(key, "acme", "S1", 7, strings.Repeat("ab", 32), events.SignRequested, "")
	msg := filepath.Join(dir, "msg")
	sig := filepath.Join(dir, "sig")
	os.WriteFile(msg, events.HeadMessage("acme", "S1", 7, strings.Repeat("ab", 32)), 0o600)
	raw, _ := base64.StdEncoding.DecodeString(p.Signature)
	os.WriteFile(sig, raw, 0o600)
	out, err := exec.Command(openssl, "pkeyutl", "-verify", "-pubin", "-inkey", signing.PublicKeyPath(path), "-rawin", "-in", msg, "-sigfile", sig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Signature Verified Successfully") {
		t.Fatalf("openssl pkeyutl -verify: %v\n%s", err, out)
	}
}

func FuzzParsePublicKey(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	dir := f.TempDir()
	p := filepath.Join(dir, "k.pub")
	signing.WritePublicKey(p, pub)
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Add([]byte(base64.StdEncoding.EncodeToString(pub)))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\n\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := signing.ParsePublicKey(b, "input")
		if err != nil {
			if !errors.Is(err, signing.ErrKey) {
				t.Fatalf("error does not wrap ErrKey: %v", err)
			}
			return
		}
		if len(k) != ed25519.PublicKeySize {
			t.Fatalf("accepted a %d-byte key", len(k))
		}
	})
}
