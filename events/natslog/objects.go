package natslog

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrObjectNotFound is returned by Objects.Get and Open for a missing name.
var ErrObjectNotFound = errors.New("natslog: object not found")

// Objects is a JetStream object store for full outputs and file pre-images
// (128 KiB chunks, SHA-256 digests). Names are the caller's; callsheet puts
// the tenant first so tenants never share a name. It is safe for concurrent
// use.
type Objects struct {
	obs    jetstream.ObjectStore
	js     jetstream.JetStream
	bucket string
	chunk  int // bytes per chunk written
}

// Objects creates (or updates) the object store bucket, file-backed with the
// Log's replica count, and returns it. Bucket names are letters, digits, '_'
// and '-'.
func (l *Log) Objects(ctx context.Context, bucket string) (*Objects, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	obs, err := ensureObjects(ctx, l.js, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "callsheet objects",
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: object store %q: %w", bucket, err)
	}
	return &Objects{obs: obs, js: l.js, bucket: bucket, chunk: l.chunkSize()}, nil
}

// Bucket returns the bucket name.
func (o *Objects) Bucket() string { return o.bucket }

// Put stores r under name, replacing any earlier object, and returns its size
// and digest ("SHA-256=<base64url>"). It reads r one chunk at a time and
// keeps at most putWindow chunks unacknowledged (objectput.go), so storing
// a 64 MiB output holds about 1 MiB of it in memory.
func (o *Objects) Put(ctx context.Context, name string, r io.Reader) (int64, string, error) {
	size, digest, err := o.putBounded(ctx, name, r)
	if err != nil {
		return 0, "", fmt.Errorf("put object %s/%s: %w", o.bucket, name, err)
	}
	return size, digest, nil
}

// Get returns the whole object, checked against its digest. A missing name
// gives ErrObjectNotFound.
func (o *Objects) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := o.obs.GetBytes(ctx, name)
	if err != nil {
		return nil, o.wrap(name, err)
	}
	return b, nil
}

// Open returns a reader of the object; reading it to the end checks the
// digest. The caller closes it. A missing name gives ErrObjectNotFound.
func (o *Objects) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := o.obs.Get(ctx, name)
	if err != nil {
		return nil, o.wrap(name, err)
	}
	return r, nil
}

// Delete removes the object. A missing name gives ErrObjectNotFound.
func (o *Objects) Delete(ctx context.Context, name string) error {
	if err := o.obs.Delete(ctx, name); err != nil {
		return o.wrap(name, err)
	}
	return nil
}

func (o *Objects) wrap(name string, err error) error {
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: %s/%s", ErrObjectNotFound, o.bucket, name)
	}
	return fmt.Errorf("object %s/%s: %w", o.bucket, name, err)
}

// ObjectInfo names one stored object and its size.
type ObjectInfo struct {
	Name string
	Size int64
}

// List returns every object in the bucket, with its size: one pass over the
// bucket's metadata (a node counts each tenant's kept outputs with it when it
// starts). An empty bucket gives no objects and no error.
func (o *Objects) List(ctx context.Context) ([]ObjectInfo, error) {
	infos, err := o.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list objects of %s: %w", o.bucket, err)
	}
	out := make([]ObjectInfo, 0, len(infos))
	for _, in := range infos {
		out = append(out, ObjectInfo{Name: in.Name, Size: int64(in.Size)})
	}
	return out, nil
}

// OpenSized is Open that also returns the object's size, so a reader can
// stream it with a known length.
// The reader buffers at most a few chunks (objectput.go, openBounded), so
// streaming a large object holds little of it; reading it to the end checks
// its size and digest (ErrCorruptObject).
func (o *Objects) OpenSized(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	r, info, err := o.openBounded(ctx, name)
	if err != nil {
		return nil, 0, o.wrap(name, err)
	}
	return r, int64(info.Size), nil
}
