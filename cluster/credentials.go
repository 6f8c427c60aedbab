package cluster

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Where a node keeps the credentials of its embedded server (docs/operations.md,
// "NATS credentials").
const (
	// CredentialsDir is the directory under a node's data dir that holds
	// its NATS credentials; mode 0700.
	CredentialsDir = "credentials"
	// CredentialsFile is the nkey seed file in CredentialsDir; mode 0600.
	CredentialsFile = "nats.nk"
)

// Errors about credentials files.
var (
	// ErrCredentials is wrapped by every error about a credentials file
	// that exists but cannot be used: unreadable, readable by others, or
	// not a seed or .creds file.
	ErrCredentials = errors.New("cluster: unusable credentials")
)

// jwtMarker starts the JWT section of a .creds file (nsc writes it so).
var jwtMarker = []byte("-----BEGIN NATS USER JWT-----")

// Credentials are the identity a client presents to a NATS server: an nkey
// user (a seed whose public key the server admits; the seed itself never
// leaves the client: the server sends a nonce and checks its signature), or,
// for an external server in operator mode, a .creds file holding a user JWT
// and its seed. The embedded server admits only nkey users.
//
// Several nodes may be given the same file (a fleet shares one identity):
// every embedded server then admits the same public key and every node
// presents it. A Credentials is immutable and safe for concurrent use.
type Credentials struct {
	path string
	kp   nkeys.KeyPair
	pub  string
	jwt  string // set for a .creds file
}

// DefaultCredentialsPath is where a node with data dir dataDir keeps the
// credentials of its embedded server: DATA/credentials/nats.nk.
func DefaultCredentialsPath(dataDir string) string {
	return filepath.Join(dataDir, CredentialsDir, CredentialsFile)
}

// NewCredentials makes fresh nkey user credentials held in memory only (Path
// is ""). StartEmbedded uses them when it is given none, so that only its own
// Connect gets in.
func NewCredentials() (*Credentials, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("cluster: make an nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("cluster: make an nkey: %w", err)
	}
	return &Credentials{kp: kp, pub: pub}, nil
}

// EnsureCredentials loads the nkey seed file at path, creating it first if
// it does not exist: a fresh user seed, written with mode 0600 in a
// directory made with mode 0700, atomically (two processes starting at once
// end up with the same file). It returns the errors of LoadCredentials, and
// an error naming the path when the file cannot be created.
func EnsureCredentials(path string) (*Credentials, error) {
	c, err := LoadCredentials(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: create the credentials directory %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory's mode alone; the seed must not
	// be reachable through a directory others can list.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: restrict the credentials directory %s to its owner: %w", dir, err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("cluster: make an nkey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("cluster: make an nkey: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".nats-*.nk")
	if err != nil {
		return nil, fmt.Errorf("cluster: write credentials in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; say so anyway, it is the point.
	err = errors.Join(tmp.Chmod(0o600), write(tmp, append(seed, '\n')), tmp.Sync(), tmp.Close())
	if err != nil {
		return nil, fmt.Errorf("cluster: write credentials %s: %w", tmp.Name(), err)
	}
	// Link, not rename: it fails if another process created the file
	// meanwhile, and then both use that one.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cluster: write credentials %s: %w", path, err)
	}
	return LoadCredentials(path)
}

func write(f *os.File, b []byte) error {
	_, err := f.Write(b)
	return err
}

// LoadCredentials reads a credentials file: an nkey user seed (one line
// "SU...", as `nk -gen user` writes it, or the decorated form), or a .creds
// file (a user JWT and its seed, as nsc writes it). The file must be
// readable by its owner only (no group or other bits), as ssh requires of a
// private key. Errors wrap fs.ErrNotExist for a missing file, or
// ErrCredentials (with fs.ErrPermission for a file this process may not
// read), each naming the path and what to do.
func LoadCredentials(path string) (*Credentials, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cluster: no credentials file at %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (NATS credentials are readable by their owner only)", ErrCredentials, path, bare(err))
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory: give the credentials file (an nkey seed or a .creds file)", ErrCredentials, path)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, so users other than its owner can read or change it: run chmod 600 %s (and replace the credentials if others may have read them)", ErrCredentials, path, m, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (NATS credentials are readable by their owner only)", ErrCredentials, path, bare(err))
	}
	defer wipe(b)
	c := &Credentials{path: path}
	if bytes.Contains(b, jwtMarker) {
		if c.jwt, err = nkeys.ParseDecoratedJWT(b); err != nil {
			return nil, fmt.Errorf("%w: %s: the user JWT does not parse: %v", ErrCredentials, path, err)
		}
	}
	if c.kp, err = nkeys.ParseDecoratedUserNKey(b); err != nil {
		return nil, fmt.Errorf("%w: %s holds no nkey user seed (%v): give a file with one line SU... (nk -gen user) or an nsc .creds file", ErrCredentials, path, err)
	}
	if c.pub, err = c.kp.PublicKey(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCredentials, path, err)
	}
	return c, nil
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

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Path is the file the credentials came from; "" for NewCredentials.
func (c *Credentials) Path() string { return c.path }

// PublicKey is the nkey user's public key ("U..."), the only part a server
// needs to admit it.
func (c *Credentials) PublicKey() string { return c.pub }

// JWT reports whether the credentials hold a user JWT (a .creds file for an
// operator-mode server), which the embedded server cannot admit.
func (c *Credentials) JWT() bool { return c.jwt != "" }

// Option is the nats.go option that presents the credentials: the nkey
// signature of the server's nonce, with the JWT for a .creds file. The seed
// stays in memory; the file is not read again on reconnect.
func (c *Credentials) Option() nats.Option {
	if c.jwt != "" {
		return nats.UserJWT(func() (string, error) { return c.jwt, nil }, c.kp.Sign)
	}
	return nats.Nkey(c.pub, c.kp.Sign)
}

// routeSecret is the password a fleet's servers present on their routes: an
// HMAC-SHA256 of a fixed label keyed by the seed, so every server given the
// same credentials derives the same password and nothing else does, and the
// seed itself never travels. nats-server's routes authenticate with a user
// and password only; the password crosses the route in clear unless the
// network between the nodes is trusted or the routes run over TLS
// (docs/operations.md, "A fleet").
func (c *Credentials) routeSecret() (string, error) {
	seed, err := c.kp.Seed()
	if err != nil {
		return "", fmt.Errorf("cluster: credentials %s: no seed to derive the route password from: %w", c.path, err)
	}
	m := hmac.New(sha256.New, seed)
	m.Write([]byte("callsheet route password v1"))
	return hex.EncodeToString(m.Sum(nil)), nil
}
