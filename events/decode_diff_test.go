package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/callsheet/callsheet/events"
)

// payloadTypes maps every event type to a fresh payload of its Go type, as
// encoding/json would decode it.
var payloadTypes = map[events.Type]func() any{
	events.TypeSessionOpened:         func() any { return &events.SessionOpened{} },
	events.TypeTurnReceived:          func() any { return &events.TurnReceived{} },
	events.TypeToolCallRequested:     func() any { return &events.ToolCallRequested{} },
	events.TypeDispatchBlocked:       func() any { return &events.DispatchBlocked{} },
	events.TypeApprovalRequested:     func() any { return &events.ApprovalRequested{} },
	events.TypeApprovalGranted:       func() any { return &events.ApprovalGranted{} },
	events.TypeApprovalDenied:        func() any { return &events.ApprovalDenied{} },
	events.TypeToolCallStarted:       func() any { return &events.ToolCallStarted{} },
	events.TypeFileCheckpointed:      func() any { return &events.FileCheckpointed{} },
	events.TypeToolCallCompleted:     func() any { return &events.ToolCallCompleted{} },
	events.TypeToolCallFailed:        func() any { return &events.ToolCallFailed{} },
	events.TypeToolCallIndeterminate: func() any { return &events.ToolCallIndeterminate{} },
	events.TypeRetryScheduled:        func() any { return &events.RetryScheduled{} },
	events.TypeResultCommitted:       func() any { return &events.ResultCommitted{} },
	events.TypeTurnCompleted:         func() any { return &events.TurnCompleted{} },
	events.TypeRetryNoticeIssued:     func() any { return &events.RetryNoticeIssued{} },
	events.TypeSessionClosed:         func() any { return &events.SessionClosed{} },
	events.TypeCallCancelled:         func() any { return &events.CallCancelled{} },
	events.TypeAnswerReceived:        func() any { return &events.AnswerReceived{} },
	events.TypeWorkStateUpdated:      func() any { return &events.WorkStateUpdated{} },
	events.TypeWorkspaceRewound:      func() any { return &events.WorkspaceRewound{} },
	events.TypeOwnershipTaken:        func() any { return &events.OwnershipTaken{} },
	events.TypeOwnershipReleased:     func() any { return &events.OwnershipReleased{} },
	events.TypeHeadSigned:            func() any { return &events.HeadSigned{} },
}

// FuzzDecodeAsStdlib holds Decode to encoding/json: Decode uses a faster
// decoder (docs/performance.md, "Fold"), and must refuse exactly the
// payloads encoding/json refuses and decode the others to equal values, for
// every event type.
func FuzzDecodeAsStdlib(f *testing.F) {
	seeds := []string{
		`{"turn":"t1","calls":[{"id":"a","name":"nap","arguments":{"ms":30}}],"parallel_tool_calls":true,"cap":8,"plan":[{"index":0,"name":"nap","effect":"read_only","timeout_ms":120000,"labels":["x"],"rewritten":{"a":1}}]}`,
		`{"turn":"t1","call":"a","index":0,"result":{"id":"a","name":"nap","outcome":"ok","content":[{"type":"text","text":"slept \u00e9\ud83d\ude00"},{"type":"json","json":[1,{"b":null}]},{"type":"image","mime":"image/png","data":"aGk="}],"truncated":false,"full_output":{"store":"s","object":"o","bytes":3,"lines":1},"attempts":1,"touched":["a.go"]}}`,
		`{"turn":"t1","call":"a","index":0,"attempt":"one"}`,
		`{"TURN":"t1","Calls":null,"cap":1e3}`,
		`{"turn":"t\xff\xfe1","cap":-0}`,
		`{"delay_ns":1.5}`,
		`{"turn":"a","turn":"b"}`,
		`{"index":9223372036854775808}`,
		`{"mode":4294967296,"size":-1,"existed":"true"}`,
		`{"answer":  [1, 2 ,{ }] , "by":"me"}`,
		`{"full_output":null,"content":null}`,
		`[]`, `null`, `"x"`, `{}`, `{"turn":"a"} x`, ``,
	}
	types := make([]events.Type, 0, len(payloadTypes))
	for typ := range payloadTypes {
		types = append(types, typ)
	}
	slices.Sort(types)
	for i, s := range seeds {
		for j := range types {
			f.Add(uint8(i+j), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		for _, typ := range []events.Type{types[int(which)%len(types)], events.TypeTurnReceived, events.TypeResultCommitted} {
			want := payloadTypes[typ]()
			stdErr := json.Unmarshal(data, want)
			got, err := events.Decode(events.Event{ID: "x", Seq: 1, Type: typ, Data: data})
			if (stdErr == nil) != (err == nil) {
				t.Fatalf("%s %q: encoding/json says %v, Decode says %v", typ, data, stdErr, err)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %q: encoding/json decodes %#v, Decode %#v", typ, data, want, got)
			}
		}
	})
}

// FuzzUnmarshalAsStdlib holds Unmarshal, and the splitting and checking of
// packed messages in events/natslog, to encoding/json: the same inputs
// refused, the others decoded to equal values.
func FuzzUnmarshalAsStdlib(f *testing.F) {
	for _, s := range []string{
		`{"id":"01J0000000000000000000000A","tenant":"t","session":"s","seq":1,"time":"2025-01-02T03:04:05.123456789Z","type":"TurnCompleted","causation":"c","prev":"sha256:ab","data":{"turn":"t1"}}`,
		`[{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":null},{"id":"b","tenant":"t","session":"s","seq":2,"type":"X","data_ref":{"bucket":"b"}}]`,
		`{"id":"a","tenant":"t","session":"s","seq":1.0,"time":"2025-13-02T03:04:05Z","type":"X"}`,
		`{"ID":"a","Tenant":"t","session":"s","seq":"1","time":null,"type":"X","data":[1,2]}`,
		`{"id":"a","tenant":"t","session":"s","seq":-1,"type":"X"}`,
		`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","time":"0000-01-01T0:00:00,0Z"}`,
		`{"id":"a\u0000","tenant":"t","session":"s","seq":18446744073709551616,"type":"X"}`,
		` [ ] `, `[1,]`, `{"a":1}{}`, `"\ud800"`, `1e400`, `{"data":{"a":}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if json.Valid(b) != fastjson.Valid(b) {
			t.Fatalf("%q: encoding/json says valid %v, the faster decoder %v", b, json.Valid(b), fastjson.Valid(b))
		}
		var want events.Event
		stdErr := json.Unmarshal(b, &want)
		if stdErr == nil && (want.ID == "" || want.Type == "" || want.Session == "" || want.Tenant == "" || want.Seq == 0) {
			stdErr = errors.New("incomplete envelope")
		}
		got, err := events.Unmarshal(b)
		if (stdErr == nil) != (err == nil) {
			t.Fatalf("%q: encoding/json says %v, Unmarshal %v", b, stdErr, err)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: encoding/json decodes %#v, Unmarshal %#v", b, want, got)
		}
		var wantRaws, gotRaws []json.RawMessage
		stdErr, err = json.Unmarshal(b, &wantRaws), fastjson.Unmarshal(b, &gotRaws)
		if (stdErr == nil) != (err == nil) || err == nil && !reflect.DeepEqual(gotRaws, wantRaws) {
			t.Fatalf("%q as a packed message: encoding/json %v %q, the faster decoder %v %q", b, stdErr, wantRaws, err, gotRaws)
		}
	})
}

// summaryViews are the partial views of payloads projections.Summary
// decodes with DecodePartial.
var summaryViews = []func() any{
	func() any {
		return &struct {
			Calls []struct {
				Name string `json:"name"`
			} `json:"calls"`
		}{}
	},
	func() any {
		return &struct {
			Result struct {
				Name    string         `json:"name"`
				Outcome events.Outcome `json:"outcome"`
			} `json:"result"`
		}{}
	},
	func() any { return &events.SessionOpened{} },
}

// FuzzDecodePartialAsStdlib holds DecodePartial to encoding/json for the
// partial views a fold decodes: it refuses what encoding/json refuses and
// decodes the rest to equal values.
func FuzzDecodePartialAsStdlib(f *testing.F) {
	f.Add([]byte(`{"turn":"t1","calls":[{"id":"a","name":"read","arguments":{"path":"x"}}]}`))
	f.Add([]byte(`{"result":{"id":"a","name":"read","outcome":"ok","content":[{"type":"text","text":"hi"}]}}`))
	f.Add([]byte(`{"workspace":"w","agent":"a","node":"n1"}`))
	f.Add([]byte(`{"calls":[{"name":1}]}`))
	f.Add([]byte(`{"result":{"outcome":"\ud800"}}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"calls":null,"result":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, view := range summaryViews {
			fast, std := view(), view()
			errFast := events.DecodePartial(events.Event{ID: "e", Type: events.TypeTurnReceived, Data: data}, fast)
			errStd := json.Unmarshal(data, std)
			if (errFast == nil) != (errStd == nil) {
				t.Fatalf("%T on %q: DecodePartial error %v, encoding/json error %v", std, data, errFast, errStd)
			}
			if errStd == nil && !reflect.DeepEqual(fast, std) {
				t.Fatalf("%T on %q: DecodePartial %+v, encoding/json %+v", std, data, fast, std)
			}
		}
	})
}
