package natslog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderMsg is one message as a stream's leader returned it.
type leaderMsg struct {
	Sequence uint64 `json:"seq"`
	Header   []byte `json:"hdrs"` // the message's headers as sent on the wire
	Data     []byte `json:"data"`
}

// leaderGet asks stream's leader for one message (req is the API's message
// get request: last_by_subj, or seq and next_by_subj). The leader has every
// acknowledged write, where a direct get may be answered by a replica that
// is behind it. found is false when no message matches.
func leaderGet(ctx context.Context, nc *nats.Conn, api, stream string, req any) (m leaderMsg, found bool, err error) {
	b, err := json.Marshal(req)
	if err != nil {
		return leaderMsg{}, false, err
	}
	resp, err := nc.RequestWithContext(ctx, api+"STREAM.MSG.GET."+stream, b)
	if err != nil {
		return leaderMsg{}, false, err
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *leaderMsg          `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return leaderMsg{}, false, fmt.Errorf("undecodable answer: %w", err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return leaderMsg{}, false, nil
	case r.Error != nil:
		return leaderMsg{}, false, r.Error
	case r.Message == nil:
		return leaderMsg{}, false, jetstream.ErrInvalidJetStreamResponse
	}
	return *r.Message, true, nil
}

// lastBySubject is the message get request for the last message matching
// a subject filter.
type lastBySubject struct {
	LastFor string `json:"last_by_subj"`
}

// nextBySubject is the message get request for the first message matching
// a subject filter at or after a stream sequence.
type nextBySubject struct {
	Seq     uint64 `json:"seq"`
	NextFor string `json:"next_by_subj"`
}
