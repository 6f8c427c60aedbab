package natslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/jsensure"
)

// The deletions log (docs/audit.md, "Deletion receipts"): a stream of its
// own, one message per deleted session on subject cs.del.TENANT.SESSION,
// holding its receipt (events.Deletion, canonical JSON). A tenant's
// receipts, in stream order, are its deletions log, each chained to the one
// before; an append is guarded twice in one message: by the tenant's last
// receipt (Nats-Expected-Last-Subject-Sequence over cs.del.TENANT.*, so
// the chain never forks) and, through it, by the session's own subject
// having none yet (checked under the same guard), so two nodes never both
// receipt one session. The stream refuses deletes and purges.

// Names of the deletions log.
const (
	// DefaultDeletionsStream is the deletions log's stream.
	DefaultDeletionsStream = "CALLSHEET_DELETIONS"
	// deletionsPrefix is its subjects' prefix.
	deletionsPrefix = "cs.del"
	// deletionAttempts bounds an append's tries when other receipts of the
	// tenant land first.
	deletionAttempts = 50
)

// ErrNoDeletions is returned by OpenDeletions when the store has no
// deletions log (a node makes it at start).
var ErrNoDeletions = errors.New("natslog: no deletions log")

// Deletions is the deletions log. It is safe for concurrent use.
type Deletions struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	api    string
	stream string
}

// Deletions creates (or updates) the deletions log's stream, file-backed
// with the Log's replica count, and returns the log on it.
func (l *Log) Deletions(ctx context.Context) (*Deletions, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	if _, err := ensureStream(ctx, l.js, jetstream.StreamConfig{
		Name:        DefaultDeletionsStream,
		Description: "callsheet deletions log: one signed receipt per deleted session, chained per tenant",
		Subjects:    []string{deletionsPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    l.cfg.replicas,
		AllowDirect: true,
		DenyDelete:  true,
		DenyPurge:   true,
	}); err != nil {
		return nil, fmt.Errorf("natslog: deletions log %s: %w", DefaultDeletionsStream, err)
	}
	return &Deletions{js: l.js, nc: l.nc, api: l.api, stream: DefaultDeletionsStream}, nil
}

// OpenDeletions opens an existing deletions log without creating or
// changing anything (for readers such as cmd/callsheet-replay). It returns
// ErrNoDeletions when there is none.
func OpenDeletions(ctx context.Context, js jetstream.JetStream) (*Deletions, error) {
	if _, err := js.Stream(ctx, DefaultDeletionsStream); errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: the store has no stream %s (a node makes it at start)", ErrNoDeletions, DefaultDeletionsStream)
	} else if err != nil {
		return nil, fmt.Errorf("natslog: deletions log %s: %w", DefaultDeletionsStream, err)
	}
	return &Deletions{js: js, nc: js.Conn(), api: jsensure.APIPrefix(js), stream: DefaultDeletionsStream}, nil
}

// DeletionsSubject is the subject of session's receipt, which every node
// may subscribe to (with "*" for either) to learn of deletions as they are
// recorded.
func DeletionsSubject(tenant, session string) string {
	return deletionsPrefix + "." + tenant + "." + session
}

// StoredDeletion is one receipt as stored: its position in the stream and
// its bytes (the receipt's canonical encoding).
type StoredDeletion struct {
	StreamSeq uint64
	Data      []byte
}

// Get returns session's receipt, if the log holds one.
func (d *Deletions) Get(ctx context.Context, tenant, session string) (StoredDeletion, bool, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return StoredDeletion{}, false, err
	}
	return d.last(ctx, DeletionsSubject(tenant, session))
}

// Append records the receipt make returns for tenant's session, unless
// the log holds one for it already, which it then returns (existed). make
// is given the hash the new receipt must name as Prev and its position n,
// and returns the receipt's bytes (events.Deletion.Encode); it may be
// called again when another receipt of the tenant lands first.
func (d *Deletions) Append(ctx context.Context, tenant, session string, make func(prev string, n uint64) ([]byte, error)) (_ StoredDeletion, existed bool, err error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return StoredDeletion{}, false, err
	}
	subject := DeletionsSubject(tenant, session)
	filter := DeletionsSubject(tenant, "*")
	for range deletionAttempts {
		last, ok, err := d.last(ctx, filter)
		if err != nil {
			return StoredDeletion{}, false, err
		}
		if mine, found, err := d.last(ctx, subject); err != nil {
			return StoredDeletion{}, false, err
		} else if found {
			return mine, true, nil
		}
		prev, n := events.DeletionGenesis(tenant), uint64(1)
		if ok {
			prevRec, err := events.ParseDeletion(last.Data)
			if err != nil {
				return StoredDeletion{}, false, fmt.Errorf("natslog: the deletions log of %s ends with a receipt that does not parse (stream seq %d): %w", tenant, last.StreamSeq, err)
			}
			prev, n = events.DeletionHash(last.Data), prevRec.N+1
		}
		data, err := make(prev, n)
		if err != nil {
			return StoredDeletion{}, false, err
		}
		m := nats.NewMsg(subject)
		m.Data = data
		setGuard(m, last.StreamSeq, filter)
		m.Header.Set(hdrMsgID, "cs-del-"+tenant+"-"+session)
		ack, err := d.js.PublishMsg(ctx, m)
		if err == nil {
			if ack.Duplicate {
				continue // another node's identical id: read what it stored
			}
			return StoredDeletion{StreamSeq: ack.Sequence, Data: data}, false, nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == codeWrongLastSeq || apiErr.ErrorCode == codeWrongLastSeqConstant) {
			continue // another receipt of the tenant landed first
		}
		return StoredDeletion{}, false, fmt.Errorf("natslog: append to the deletions log of %s: %w", tenant, err)
	}
	return StoredDeletion{}, false, fmt.Errorf("natslog: append to the deletions log of %s: other receipts landed first %d times; retry", tenant, deletionAttempts)
}

// List returns tenant's receipts in the log's order, skipping the first
// after of them, at most limit.
func (d *Deletions) List(ctx context.Context, tenant string, after uint64, limit int) ([]StoredDeletion, error) {
	if !events.ValidID(tenant) {
		return nil, fmt.Errorf("%w: tenant %q", ErrInvalidID, tenant)
	}
	filter := DeletionsSubject(tenant, "*")
	var out []StoredDeletion
	var pos uint64
	for start := uint64(1); len(out) < limit; {
		batch, err := d.batch(ctx, start, filter, 1000)
		if err != nil {
			return nil, err
		}
		if len(batch) == 0 {
			break
		}
		for _, m := range batch {
			if pos++; pos > after && len(out) < limit {
				out = append(out, m)
			}
			start = m.StreamSeq + 1
		}
	}
	return out, nil
}

// last asks the stream leader for the last message matching filter.
func (d *Deletions) last(ctx context.Context, filter string) (StoredDeletion, bool, error) {
	m, found, err := leaderGet(ctx, d.nc, d.api, d.stream, lastBySubject{filter})
	if err != nil {
		return StoredDeletion{}, false, fmt.Errorf("natslog: deletions log: get the last of %s: %w", filter, err)
	}
	return StoredDeletion{StreamSeq: m.Sequence, Data: m.Data}, found, nil
}

// batch returns up to n messages matching filter from stream sequence
// start on, with one batched direct get.
func (d *Deletions) batch(ctx context.Context, start uint64, filter string, n int) ([]StoredDeletion, error) {
	inbox := d.nc.NewRespInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{start, filter, n})
	if err := d.nc.PublishRequest(d.api+"DIRECT.GET."+d.stream, inbox, req); err != nil {
		return nil, err
	}
	var out []StoredDeletion
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("natslog: deletions log: read %s from %d: %w", filter, start, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204", "404": // end of batch, or nothing from start on
			return out, nil
		case "503":
			return nil, fmt.Errorf("natslog: deletions log: read %s: %w", filter, jetstream.ErrNoStreamResponse)
		default:
			return nil, fmt.Errorf("natslog: deletions log: read %s from %d: status %s %s", filter, start, st, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("natslog: deletions log: read %s: bad %s header %q", filter, jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
		}
		out = append(out, StoredDeletion{StreamSeq: seq, Data: m.Data})
	}
}

// Receipted returns every session the log holds a receipt of, as
// "TENANT/SESSION", from the stream's subjects (one request per page of
// subjects, no message read).
func (d *Deletions) Receipted(ctx context.Context) (map[string]bool, error) {
	st, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return nil, fmt.Errorf("natslog: deletions log %s: %w", d.stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(DeletionsSubject("*", "*")))
	if err != nil {
		return nil, fmt.Errorf("natslog: deletions log %s: %w", d.stream, err)
	}
	out := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if parts := strings.Split(subj, "."); len(parts) == 4 {
			out[parts[2]+"/"+parts[3]] = true
		}
	}
	return out, nil
}
