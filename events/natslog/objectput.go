package natslog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// putWindow is how many chunks of one object Put keeps unacknowledged.
//
// Why Put does not call nats.go's ObjectStore.Put: that one publishes every
// chunk asynchronously with up to 4,000 in flight. A server that stores more
// slowly than the client reads (every file-store write fsynced, with the
// default "durability": "fsync") queues the rest in its stream's ingest
// queue, up to 128 MiB: a 64 MiB output took an embedded node's RSS from 21
// to 109 MB when measured. With a window of 8 chunks (1 MiB) memory stays
// flat and the speed is the server's fsync rate either way.
const putWindow = 8

// putBounded stores r as an object in the object store's own format (the
// one nats.go's ObjectStore reads: chunks on $O.BUCKET.C.NUID, then the
// metadata on $O.BUCKET.M.<base64url name> with a subject rollup), with at
// most putWindow chunks in flight. An earlier object of the same name is
// replaced: its chunks are purged once the new metadata is stored. A failed
// put purges the chunks it stored.
func (o *Objects) putBounded(ctx context.Context, name string, r io.Reader) (int64, string, error) {
	if name == "" {
		return 0, "", jetstream.ErrBadObjectMeta
	}
	old, err := o.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, "", err
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	nuid := hex.EncodeToString(id[:])
	chunkSubj := fmt.Sprintf("$O.%s.C.%s", o.bucket, nuid)
	stream := "OBJ_" + o.bucket
	purge := func(subj string) {
		// Best effort: a purge that fails leaves chunks no metadata names.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultTimeout)
		defer cancel()
		if s, err := o.js.Stream(pctx, stream); err == nil {
			_ = s.Purge(pctx, jetstream.WithPurgeSubject(subj))
		}
	}

	// Chunks are read into a ring of putWindow+1 buffers: a future keeps
	// its message (it may resend it) until acknowledged, and at most
	// putWindow are unacknowledged, so the next buffer is always free.
	var (
		h        = sha256.New()
		ring     [putWindow + 1][]byte
		inFlight []jetstream.PubAckFuture
		size     uint64
		chunks   uint32
	)
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fail := func(err error) (int64, string, error) {
		for _, f := range inFlight {
			_ = wait(f) // let what was sent land before purging it
		}
		purge(chunkSubj)
		return 0, "", err
	}
	for {
		if len(inFlight) == putWindow {
			if err := wait(inFlight[0]); err != nil {
				inFlight = inFlight[1:]
				return fail(err)
			}
			inFlight = inFlight[1:]
		}
		buf := ring[chunks%uint32(len(ring))]
		if buf == nil {
			buf = make([]byte, max(o.chunk, 1))
			ring[chunks%uint32(len(ring))] = buf
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			m := nats.NewMsg(chunkSubj)
			m.Data = buf[:n]
			f, err := o.js.PublishMsgAsync(m)
			if err != nil {
				return fail(err)
			}
			inFlight = append(inFlight, f)
			size += uint64(n)
			chunks++
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fail(rerr)
		}
	}
	for len(inFlight) > 0 {
		if err := wait(inFlight[0]); err != nil {
			inFlight = inFlight[1:]
			return fail(err)
		}
		inFlight = inFlight[1:]
	}
	digest := "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(max(o.chunk, 1))}},
		Bucket:     o.bucket, NUID: nuid, Size: size, ModTime: time.Now().UTC(), Chunks: chunks, Digest: digest,
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return fail(err)
	}
	mm := nats.NewMsg(fmt.Sprintf("$O.%s.M.%s", o.bucket, base64.URLEncoding.EncodeToString([]byte(name))))
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = meta
	if _, err := o.js.PublishMsg(ctx, mm); err != nil {
		return fail(err)
	}
	if old != nil && !old.Deleted {
		purge(fmt.Sprintf("$O.%s.C.%s", o.bucket, old.NUID))
	}
	return int64(size), digest, nil
}

// openBounded opens an object for reading with at most putWindow chunks
// buffered: nats.go's ObjectStore.Get pushes every chunk to the client as
// fast as the server sends them, so a reader slower than the server (an HTTP
// client) would have the node hold most of the object. The reader checks
// the object's size and digest at its end and fails with an error wrapping
// ErrCorruptObject if they do not match.
func (o *Objects) openBounded(ctx context.Context, name string) (io.ReadCloser, *jetstream.ObjectInfo, error) {
	info, err := o.obs.GetInfo(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if info.Opts != nil && info.Opts.Link != nil {
		r, err := o.obs.Get(ctx, name) // a link (callsheet makes none): nats.go follows it
		return r, info, err
	}
	cr := &chunkReader{info: info, h: sha256.New()}
	if info.Chunks == 0 {
		return cr, info, nil
	}
	cons, err := o.js.OrderedConsumer(ctx, "OBJ_"+o.bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fmt.Sprintf("$O.%s.C.%s", o.bucket, info.NUID)},
	})
	if err != nil {
		return nil, nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(putWindow))
	if err != nil {
		return nil, nil, err
	}
	cr.it, cr.ctx = it, ctx
	return cr, info, nil
}

// ErrCorruptObject is wrapped by a read of an object whose chunks do not
// add up to the size or digest its metadata records.
var ErrCorruptObject = errors.New("natslog: object does not match its digest")

// chunkReader reads an object's chunks one by one from a bounded pull.
type chunkReader struct {
	info   *jetstream.ObjectInfo
	ctx    context.Context
	it     jetstream.MessagesContext
	h      hash.Hash
	cur    []byte
	chunks uint32
	size   uint64
	err    error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.chunks == c.info.Chunks {
			digest := "SHA-256=" + base64.URLEncoding.EncodeToString(c.h.Sum(nil))
			if c.size != c.info.Size || digest != c.info.Digest {
				c.err = fmt.Errorf("%w: %s/%s: read %d bytes with %s, want %d bytes with %s", ErrCorruptObject, c.info.Bucket, c.info.Name, c.size, digest, c.info.Size, c.info.Digest)
			} else {
				c.err = io.EOF
			}
			continue
		}
		m, err := c.it.Next(jetstream.NextContext(c.ctx))
		if err != nil {
			c.err = fmt.Errorf("read object %s/%s chunk %d of %d: %w", c.info.Bucket, c.info.Name, c.chunks+1, c.info.Chunks, err)
			continue
		}
		c.cur = m.Data()
		c.h.Write(c.cur)
		c.chunks++
		c.size += uint64(len(c.cur))
		_ = m.Ack() // ordered consumers need none; harmless
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

func (c *chunkReader) Close() error {
	if c.it != nil {
		c.it.Stop()
	}
	return nil
}
