package natslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Removing a session from the stores (docs/spec.md §10, "Deletion"). Each
// step removes what it finds and counts it; finding nothing is not an
// error, so a deletion cut short is finished by running it again.

// purge removes every message of stream matching filter with one purge
// request and returns how many it removed. A stream that does not exist
// holds nothing.
func purge(ctx context.Context, nc *nats.Conn, api, stream, filter string) (uint64, error) {
	req, _ := json.Marshal(struct {
		Filter string `json:"filter"`
	}{filter})
	resp, err := nc.RequestWithContext(ctx, api+"STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge %s of stream %s: %w", filter, stream, err)
	}
	var r struct {
		Error  *jetstream.APIError `json:"error"`
		Purged uint64              `json:"purged"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return 0, fmt.Errorf("purge %s of stream %s: undecodable answer: %w", filter, stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return 0, nil
		}
		return 0, fmt.Errorf("purge %s of stream %s: %w", filter, stream, r.Error)
	}
	return r.Purged, nil
}

// Purged counts what PurgeSession removed.
type Purged struct {
	// Messages of the session's events (a message holds one or more
	// events) and of its snapshot.
	Messages, SnapshotMessages uint64
	// Payloads stored by reference (cs_payloads), and their bytes.
	Payloads     int
	PayloadBytes int64
}

// PurgeSession removes what the log keeps of tenant's session: every
// message on the session's subjects (its events and its requests), its
// snapshot, and the payloads it stored by reference; and forgets the
// session's position, so a later append starts from an empty log (which
// only a SessionOpened can). It returns what it removed.
func (l *Log) PurgeSession(ctx context.Context, tenant, session string) (Purged, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return Purged{}, err
	}
	var p Purged
	var err error
	if p.Messages, err = purge(ctx, l.nc, l.api, l.cfg.stream, l.sessionFilter(tenant, session)); err != nil {
		return p, err
	}
	if p.SnapshotMessages, err = purge(ctx, l.nc, l.api, l.cfg.stream+snapStreamSuffix, l.snapFilter(tenant, session)); err != nil {
		return p, err
	}
	l.mu.Lock()
	delete(l.pos, sessionKey(tenant, session))
	l.mu.Unlock()
	l.tips.forget(sessionKey(tenant, session))
	obs, err := l.payloadStore(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	o := &Objects{obs: obs, js: l.js, bucket: l.cfg.payloadBucket}
	gone, err := o.DeletePrefix(ctx, tenant+"/"+session+"/")
	for _, in := range gone {
		p.Payloads++
		p.PayloadBytes += in.Size
	}
	return p, err
}

// DeletePrefix deletes every object whose name starts with prefix (a
// session's, "TENANT/SESSION/": callsheet names every object so) and
// returns those it deleted. It reads the bucket's list of objects once.
func (o *Objects) DeletePrefix(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	infos, err := o.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []ObjectInfo
	for _, in := range infos {
		if !strings.HasPrefix(in.Name, prefix) {
			continue
		}
		if err := o.Delete(ctx, in.Name); err != nil && !errors.Is(err, ErrObjectNotFound) {
			return out, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Delete removes a session's entry from the index. An entry that is not
// there is not an error.
func (x *Index) Delete(ctx context.Context, tenant, session string) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	if err := x.kv.Purge(ctx, sessionKey(tenant, session)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("index: remove session %s/%s: %w", tenant, session, err)
	}
	return nil
}

// DeleteAt removes a session's entry from the index if it is still the one
// at revision rev, and reports whether it did: an entry written since stays.
func (x *Index) DeleteAt(ctx context.Context, tenant, session string, rev uint64) (bool, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return false, err
	}
	err := x.kv.Purge(ctx, sessionKey(tenant, session), jetstream.LastRevision(rev))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == codeWrongLastSeq || apiErr.ErrorCode == codeWrongLastSeqConstant):
		return false, nil
	}
	return false, fmt.Errorf("index: remove session %s/%s at revision %d: %w", tenant, session, rev, err)
}

// Forget removes a session from the search index: its summary and its
// markers (the day markers, shared by the day's sessions, stay), with a
// purge of the bucket's stream for each form of key. It returns how many
// keys it removed.
func (x *Search) Forget(ctx context.Context, tenant, session string) (uint64, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return 0, err
	}
	api := strings.TrimSuffix(x.direct, "DIRECT.GET.KV_"+DefaultSearchBucket)
	var n uint64
	for _, filter := range []string{tenant + ".s.*." + session, tenant + ".m.*.*.*." + session} {
		k, err := purge(ctx, x.nc, api, "KV_"+DefaultSearchBucket, "$KV."+DefaultSearchBucket+"."+filter)
		if err != nil {
			return n, fmt.Errorf("search index: remove session %s/%s: %w", tenant, session, err)
		}
		n += k
	}
	return n, nil
}

// Delete removes a session's checkpoint. One that is not there is not an
// error.
func (c *Checkpoints) Delete(ctx context.Context, tenant, session string) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	if err := c.kv.Purge(ctx, sessionKey(tenant, session)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("natslog: remove the checkpoint of %s/%s: %w", tenant, session, err)
	}
	return nil
}

// PurgeMessages removes what is left on the session's subjects of the event
// stream and of its snapshot (what a read or an append that was in flight
// during a deletion may have written after it), and returns how many
// messages it removed.
func (l *Log) PurgeMessages(ctx context.Context, tenant, session string) (uint64, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return 0, err
	}
	a, err := purge(ctx, l.nc, l.api, l.cfg.stream, l.sessionFilter(tenant, session))
	if err != nil {
		return a, err
	}
	b, err := purge(ctx, l.nc, l.api, l.cfg.stream+snapStreamSuffix, l.snapFilter(tenant, session))
	return a + b, err
}
