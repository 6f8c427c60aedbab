package natslog_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events/natslog"
)

// TestObjectsStreamBothWays: Put and OpenSized speak the object store's own
// format (nats.go's ObjectStore reads what Put stores, and OpenSized reads
// what nats.go stores), a replaced object's chunks are purged, List counts
// sizes, and a chunk changed under an object fails its read.
func TestObjectsStreamBothWays(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	o, err := l.Objects(ctx, "cs_outputs")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := js.ObjectStore(ctx, "cs_outputs")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) ([]byte, int64, error) {
		r, size, err := o.OpenSized(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		return b, size, err
	}
	big := bytes.Repeat([]byte("callsheet\n"), 300_000) // 3 MB: 23 chunks, more than the window
	for _, data := range [][]byte{nil, []byte("x"), big} {
		name := fmt.Sprintf("t/s/%d", len(data))
		if _, _, err := o.Put(ctx, name, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if got, err := raw.GetBytes(ctx, name); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("nats.go reads %d bytes (%v) of the %d put", len(got), err, len(data))
		}
		if got, size, err := read(name); err != nil || !bytes.Equal(got, data) || size != int64(len(data)) {
			t.Fatalf("OpenSized reads %d bytes of %d (%v), want %d", len(got), size, err, len(data))
		}
	}
	if _, err := raw.PutBytes(ctx, "t/s/theirs", big); err != nil {
		t.Fatal(err)
	}
	if got, _, err := read("t/s/theirs"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("OpenSized reads %d bytes of nats.go's object (%v)", len(got), err)
	}

	// Replacing an object leaves only the new chunks.
	stream, err := js.Stream(ctx, "OBJ_cs_outputs")
	if err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O.cs_outputs.C.>"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	before := count()
	if _, _, err := o.Put(ctx, "t/s/3000000", bytes.NewReader([]byte("small now"))); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before-23+1 {
		t.Fatalf("after replacing a 23-chunk object with a 1-chunk one the bucket holds %d chunks, want %d", after, before-22)
	}

	infos, err := o.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, in := range infos {
		sizes[in.Name] = in.Size
	}
	if sizes["t/s/3000000"] != 9 || sizes["t/s/theirs"] != int64(len(big)) || sizes["t/s/1"] != 1 {
		t.Fatalf("List = %v", sizes)
	}

	// A chunk replaced under the metadata: the read fails, naming it.
	info, err := raw.GetInfo(ctx, "t/s/1")
	if err != nil {
		t.Fatal(err)
	}
	subj := "$O.cs_outputs.C." + info.NUID
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subj, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := read("t/s/1"); !errors.Is(err, natslog.ErrCorruptObject) {
		t.Fatalf("read of a changed object: %v, want ErrCorruptObject", err)
	}
}
