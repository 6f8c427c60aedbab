package natslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAckFastReadsServerAcks publishes to a real server and checks that what
// it answers for a message stored and for a duplicate is read by ackFast (the
// usual case does not fall back to reflection), and that publishOne reads a
// refusal as jetstream does: an *APIError that refused recognises.
func TestAckFastReadsServerAcks(t *testing.T) {
	l, js := embeddedLog(t, false)
	nc := js.Conn()
	ctx := context.Background()
	subject := l.cfg.prefix + ".acme.s1.log"
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{}`)
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}

	for i, want := range []pubAck{{Stream: l.cfg.stream, Sequence: 1}, {Stream: l.cfg.stream, Sequence: 1, Duplicate: true}} {
		resp, err := nc.RequestMsgWithContext(ctx, msg("m1"))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ackFast(resp.Data, l.ackPrefix, l.cfg.stream)
		if !ok || got != want {
			t.Fatalf("publish %d: ackFast(%s) = %+v, %v; want %+v, true", i+1, resp.Data, got, ok, want)
		}
	}
	if ack, err := l.publishOne(ctx, msg("m2")); err != nil || ack != (pubAck{Stream: l.cfg.stream, Sequence: 2}) {
		t.Fatalf("publishOne = %+v, %v; want seq 2", ack, err)
	}

	m := msg("m3")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "1") // the subject's last is 2
	_, err := l.publishOne(ctx, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != codeWrongLastSeq || !refused(err) {
		t.Fatalf("a publish guarded on a stale sequence: %v, want the server's wrong-last-sequence refusal", err)
	}

	if _, err := l.publishOne(ctx, nats.NewMsg("nobody.listens")); !errors.Is(err, jetstream.ErrNoStreamResponse) || !Unavailable(err) {
		t.Fatalf("a publish no stream takes: %v, want jetstream.ErrNoStreamResponse", err)
	}
}

// TestDecodeAck covers what ackFast leaves to encoding/json.
func TestDecodeAck(t *testing.T) {
	prefix := ackPrefix("CALLSHEET")
	for _, c := range []struct {
		data string
		fast bool
		want pubAck
		err  string
	}{
		{data: `{"stream":"CALLSHEET","seq":7}`, fast: true, want: pubAck{Stream: "CALLSHEET", Sequence: 7}},
		{data: `{"stream":"CALLSHEET","seq":0}`, fast: true, want: pubAck{Stream: "CALLSHEET"}},
		{data: `{"stream":"CALLSHEET","seq":18446744073709551615,"duplicate": true}`, fast: true, want: pubAck{Stream: "CALLSHEET", Sequence: 1<<64 - 1, Duplicate: true}},
		{data: `{"stream":"CALLSHEET","seq":7,"duplicate":true}`, want: pubAck{Stream: "CALLSHEET", Sequence: 7, Duplicate: true}},
		{data: `{"stream":"CALLSHEET","domain":"hub","seq":7}`, want: pubAck{Stream: "CALLSHEET", Sequence: 7}},
		{data: `{"stream":"CALLSHEET","seq":7,"batch":"b","count":3}`, want: pubAck{Stream: "CALLSHEET", Sequence: 7, Batch: "b", Count: 3}},
		{data: `{"stream":"OTHER","seq":7}`, want: pubAck{Stream: "OTHER", Sequence: 7}},
		{data: `{"stream":"CALLSHEET","seq":07}`, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, `{"stream":"CALLSHEET","seq":07}`)},
		{data: `{"stream":"CALLSHEET","seq":18446744073709551616}`, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, `{"stream":"CALLSHEET","seq":18446744073709551616}`)},
		{data: `{"stream":"CALLSHEET","seq":7} `, want: pubAck{Stream: "CALLSHEET", Sequence: 7}},
		{data: `{"stream":"CALLSHEET","seq":7}}`, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, `{"stream":"CALLSHEET","seq":7}}`)},
		{data: `{"stream":"CALLSHEET","seq":}`, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, `{"stream":"CALLSHEET","seq":}`)},
		{data: `{"seq":7}`, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, `{"seq":7}`)},
		{data: ``, err: fmt.Sprintf("%v: %q", jetstream.ErrInvalidJSAck, ``)},
		{data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"},"stream":"CALLSHEET","seq":0}`,
			err: (&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence: 2"}).Error()},
	} {
		_, fast := ackFast([]byte(c.data), prefix, "CALLSHEET")
		got, err := decodeAck([]byte(c.data), prefix, "CALLSHEET")
		switch {
		case fast != c.fast:
			t.Errorf("%s: read by ackFast %v, want %v", c.data, fast, c.fast)
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("%s: %+v, %v; want error %q", c.data, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %+v, %v; want %+v", c.data, got, err, c.want)
		}
	}
	plain := []byte(`{"stream":"CALLSHEET","seq":123456}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeAck(plain, prefix, "CALLSHEET") }); n != 0 {
		t.Errorf("decodeAck of a plain acknowledgement: %v allocations, want 0", n)
	}
}

// FuzzAckFast holds ackFast to encoding/json: whatever it reads, json.Unmarshal
// reads the same way, as an acknowledgement without an error.
func FuzzAckFast(f *testing.F) {
	for _, s := range []string{`{"stream":"CALLSHEET","seq":1}`, `{"stream":"CALLSHEET","seq":42,"duplicate": true}`,
		`{"stream":"CALLSHEET","seq":0}`, `{"stream":"CALLSHEET","seq":007}`, `{"stream":"CALLSHEET","seq":99999999999999999999}`,
		`{"error":{"code":503,"err_code":10008,"description":"x"}}`} {
		f.Add([]byte(s))
	}
	prefix := ackPrefix("CALLSHEET")
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeAck(data, prefix, "CALLSHEET")
		got, ok := ackFast(data, prefix, "CALLSHEET")
		if !ok {
			return
		}
		var want pubAck
		if err := json.Unmarshal(data, &want); err != nil || want.Error != nil || got != want {
			t.Fatalf("ackFast(%s) = %+v; encoding/json: %+v, %v", data, got, want, err)
		}
	})
}
