package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Where a node keeps its signing key, beside its NATS credentials.
const (
	// KeyFile is the private key's file name under DATA/credentials; mode
	// 0600.
	KeyFile = "signing.key"
	// credentialsDir is DATA's credentials directory (cluster.CredentialsDir).
	credentialsDir = "credentials"
)

// ErrKey is wrapped by every error about a key file that exists but cannot
// be used: unreadable, readable by others, or not an ed25519 key.
var ErrKey = errors.New("signing: unusable key file")

// DefaultKeyPath is where a node with data dir dataDir keeps its signing
// key: DATA/credentials/signing.key.
func DefaultKeyPath(dataDir string) string {
	return filepath.Join(dataDir, credentialsDir, KeyFile)
}

// PublicKeyPath is where the public key of the private key at path is kept:
// path with its ".key" extension replaced by ".pub" (or ".pub" appended).
func PublicKeyPath(path string) string {
	return strings.TrimSuffix(path, ".key") + ".pub"
}

// Ensure loads the private key at path, creating it first if it does not
// exist: a fresh ed25519 key written with mode 0600 in a directory made
// with mode 0700, atomically (two processes starting at once end up with
// the same key). It writes the public key file (PublicKeyPath) when it is
// missing. created reports whether the key is new. Errors are Load's, or
// name the path that could not be written.
func Ensure(path string) (key ed25519.PrivateKey, created bool, err error) {
	key, err = Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err = create(path); err != nil {
			return nil, false, err
		}
		created = true
		key, err = Load(path)
	}
	if err != nil {
		return nil, false, err
	}
	pub := PublicKeyPath(path)
	if _, serr := os.Stat(pub); errors.Is(serr, fs.ErrNotExist) {
		if err := WritePublicKey(pub, key.Public().(ed25519.PublicKey)); err != nil {
			return nil, false, err
		}
	}
	return key, created, nil
}

func create(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("signing: create the key directory %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory's mode alone; the key must not
	// be reachable through a directory others can list.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("signing: restrict the key directory %s to its owner: %w", dir, err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("signing: make a key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("signing: encode the key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".signing-*.key")
	if err != nil {
		return fmt.Errorf("signing: write the key in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	block := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	_, werr := tmp.Write(block)
	if err := errors.Join(tmp.Chmod(0o600), werr, tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("signing: write the key %s: %w", tmp.Name(), err)
	}
	// Link, not rename: it fails if another process created the key
	// meanwhile, and then both use that one.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("signing: write the key %s: %w", path, err)
	}
	return nil
}

// Load reads an ed25519 private key from a PEM "PRIVATE KEY" (PKCS#8) file,
// as Ensure and `openssl genpkey -algorithm ed25519` write it. The file must
// be readable by its owner only (no group or other bits), as ssh requires of
// a private key. Errors wrap fs.ErrNotExist for a missing file, or ErrKey
// (with fs.ErrPermission for a file this process may not read), each naming
// the path and what to do.
func Load(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("signing: no key file at %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, bare(err))
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory: give the key file (PEM PRIVATE KEY)", ErrKey, path)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, so users other than its owner can read or change it: run chmod 600 %s (and make a new key if others may have read it: they could sign as the node)", ErrKey, path, m, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, bare(err))
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s holds no PEM PRIVATE KEY block: give an ed25519 key in PKCS#8 PEM (openssl genpkey -algorithm ed25519 -out %s)", ErrKey, path, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKey, path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds a %T key, not ed25519 (openssl genpkey -algorithm ed25519 -out %s)", ErrKey, path, k, path)
	}
	return key, nil
}

// WritePublicKey writes pub as a PEM "PUBLIC KEY" (SubjectPublicKeyInfo)
// file, mode 0644: what an auditor is given, and what LoadPublicKey and
// openssl read.
func WritePublicKey(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("signing: encode the public key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("signing: write the public key %s: %w", path, err)
	}
	return nil
}

// LoadPublicKey reads an ed25519 public key from a file holding a PEM
// "PUBLIC KEY" (signing.pub, or `openssl pkey -pubout`), or the base64 of its
// 32 bytes. Errors wrap fs.ErrNotExist for a missing file, or ErrKey, naming
// the path.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("signing: no public key file at %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, bare(err))
	}
	return ParsePublicKey(b, path)
}

// ParsePublicKey parses what LoadPublicKey reads; where names the input in
// errors.
func ParsePublicKey(b []byte, where string) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("%w: %s holds a PEM %q block: give the public key (PEM PUBLIC KEY, such as DATA/credentials/signing.pub), never the private key", ErrKey, where, block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrKey, where, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%w: %s holds a %T public key, not ed25519", ErrKey, where, k)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %s is neither a PEM PUBLIC KEY nor the base64 of a %d-byte ed25519 public key", ErrKey, where, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// bare drops the operation and path of a *fs.PathError, which the message
// around it already names.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
