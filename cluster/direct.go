package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/callsheet/callsheet/internal/jsensure"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvEntry is a KV entry read with a direct get (lastEntries).
type kvEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e kvEntry) Bucket() string                  { return e.bucket }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.value }
func (e kvEntry) Revision() uint64                { return e.rev }
func (e kvEntry) Created() time.Time              { return e.created }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// Headers of a KV entry as the server stores it.
const (
	kvOperationHeader = "KV-Operation"
	markerHeader      = "Nats-Marker-Reason"
)

// lastEntries returns the latest entry of every key of bucket, with one
// batched direct get ("multi_last", nats-server 2.11+), answered by any of
// the bucket's replicas. A delete is KeyValueDelete; a purge, and the
// marker the server leaves where a key's TTL ran out, KeyValuePurge.
func lastEntries(ctx context.Context, js jetstream.JetStream, bucket string) ([]jetstream.KeyValueEntry, error) {
	nc := js.Conn()
	prefix := "$KV." + bucket + "."
	req, _ := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{[]string{prefix + ">"}})
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(jsensure.APIPrefix(js)+"DIRECT.GET.KV_"+bucket, inbox, req); err != nil {
		return nil, err
	}
	var out []jetstream.KeyValueEntry
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("cluster: read %s directly: %w", bucket, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204", "404": // the end of the answer, or an empty bucket
			return out, nil
		default:
			return nil, fmt.Errorf("cluster: read %s directly: status %s %s", bucket, st, m.Header.Get("Description"))
		}
		e, ok := entryOf(bucket, prefix, m)
		if !ok {
			return nil, fmt.Errorf("cluster: read %s directly: an answer without subject or sequence", bucket)
		}
		out = append(out, e)
	}
}

// entryOf reads one message of a direct get's answer as a KV entry.
func entryOf(bucket, prefix string, m *nats.Msg) (kvEntry, bool) {
	key, ok := strings.CutPrefix(m.Header.Get(jetstream.SubjectHeader), prefix)
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if !ok || err != nil {
		return kvEntry{}, false
	}
	e := kvEntry{bucket: bucket, key: key, value: m.Data, rev: rev, op: jetstream.KeyValuePut}
	e.created, _ = time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	switch {
	case m.Header.Get(markerHeader) != "":
		e.op = jetstream.KeyValuePurge
	case m.Header.Get(kvOperationHeader) == "DEL":
		e.op = jetstream.KeyValueDelete
	case m.Header.Get(kvOperationHeader) == "PURGE":
		e.op = jetstream.KeyValuePurge
	}
	return e, true
}
