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
	bucket string
}

// Objects creates (or updates) the object store bucket, file-backed with the
// Log's replica count, and returns it. Bucket names are letters, digits, '_'
// and '-'.
func (l *Log) Objects(ctx context.Context, bucket string) (*Objects, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	obs, err := l.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "callsheet objects",
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natslog: object store %q: %w", bucket, err)
	}
	return &Objects{obs: obs, bucket: bucket}, nil
}

// Bucket returns the bucket name.
func (o *Objects) Bucket() string { return o.bucket }

// Put stores r under name, replacing any earlier object, and returns its size
// and digest ("SHA-256=<base64url>").
func (o *Objects) Put(ctx context.Context, name string, r io.Reader) (int64, string, error) {
	info, err := o.obs.Put(ctx, jetstream.ObjectMeta{Name: name}, r)
	if err != nil {
		return 0, "", fmt.Errorf("put object %s/%s: %w", o.bucket, name, err)
	}
	return int64(info.Size), info.Digest, nil
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
