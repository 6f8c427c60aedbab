package natslog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

const stubSeed = `{"id":"a","tenant":"t","session":"s","seq":1,"time":"2025-01-02T03:04:05Z","type":"TurnReceived","data_ref":{"bucket":"cs_payloads","object":"t/s/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","bytes":4}}`

func FuzzDecodeMsg(f *testing.F) {
	f.Add([]byte(`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}}`))
	f.Add([]byte(`[{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}},{"id":"b","tenant":"t","session":"s","seq":2,"type":"X","data":{}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(stubSeed))
	f.Add([]byte(`[` + stubSeed + `,{"id":"b","tenant":"t","session":"s","seq":2,"type":"X","data":{}}]`))
	f.Add([]byte(strings.Replace(stubSeed, `"object":"t/s/`, `"object":"other/s/`, 1)))
	f.Add([]byte(`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":null,"data_ref":{"object":"t/s/x","sha256":"x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := decodeStored(b)
		if err == nil && len(ss) == 0 {
			t.Fatal("decoded no events without an error")
		}
		for _, s := range ss {
			if s.ref == nil {
				continue
			}
			// A reference always names an object of the event's own
			// tenant and session, by a well-formed digest.
			if want := s.ev.Tenant + "/" + s.ev.Session + "/" + s.ref.SHA256; s.ref.Object != want || len(s.ref.SHA256) != 64 {
				t.Fatalf("accepted reference %+v for %s/%s", s.ref, s.ev.Tenant, s.ev.Session)
			}
			if s.ev.Data != nil && string(s.ev.Data) != "null" {
				t.Fatalf("accepted an event with both data and data_ref: %s", b)
			}
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	one := []byte(`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}}`)
	f.Add(encodeSnap([]snapEntry{{sseq: 3, data: one}}))
	f.Add(encodeSnap([]snapEntry{{sseq: 3, data: one}, {sseq: 9, data: []byte(`[` + string(one) + `]`)}}))
	f.Add(encodeSnap([]snapEntry{{sseq: 9, data: one}, {sseq: 3, data: one}}))
	f.Add([]byte(snapMagic))
	f.Add([]byte("CSS1\x05\x03abc"))
	f.Add([]byte("CSS1\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte(`{"forged":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodeSnap(b)
		if err != nil {
			return
		}
		if len(entries) == 0 {
			t.Fatal("decoded no entries without an error")
		}
		for i, e := range entries {
			if len(e.data) == 0 || (i > 0 && e.sseq <= entries[i-1].sseq) {
				t.Fatalf("accepted entry %d: sseq %d, %d bytes", i, e.sseq, len(e.data))
			}
		}
		// What decodes encodes back to the same bytes.
		if again := encodeSnap(entries); string(again) != string(b) {
			t.Fatalf("re-encoded %q as %q", b, again)
		}
	})
}

func FuzzDecodeLastStored(f *testing.F) {
	f.Add([]byte(`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}}`))
	f.Add([]byte(`[{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{"s":"],[\"}"}},{"id":"b","tenant":"t","session":"s","seq":2,"type":"X","data":[1,[2,{"x":"\\"]"}]]}]`))
	f.Add([]byte(` [ ` + stubSeed + ` ] `))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[1,2`))
	f.Add([]byte(`[[],{}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// lastElement finds what encoding/json splits as the last element.
		var raws []json.RawMessage
		if json.Unmarshal(b, &raws) == nil {
			el, ok := lastElement(bytes.TrimLeft(b, " \t\r\n"))
			if len(raws) == 0 {
				if ok {
					t.Fatalf("last element %q of an empty array", el)
				}
			} else if want := bytes.TrimSpace(raws[len(raws)-1]); !ok || !bytes.Equal(el, want) {
				t.Fatalf("last element of %q = %q, %v; want %q", b, el, ok, want)
			}
		}
		// What decodeStored accepts, decodeLastStored decodes the same.
		ss, err := decodeStored(b)
		if err != nil {
			return
		}
		got, err := decodeLastStored(b)
		if err != nil {
			t.Fatalf("decodeLastStored(%q): %v, decodeStored accepted it", b, err)
		}
		want := ss[len(ss)-1]
		g, _ := json.Marshal(struct {
			E events.Event
			R *PayloadRef
		}{got.ev, got.ref})
		w, _ := json.Marshal(struct {
			E events.Event
			R *PayloadRef
		}{want.ev, want.ref})
		if !bytes.Equal(g, w) {
			t.Fatalf("decodeLastStored(%q) = %s, decodeStored's last = %s", b, g, w)
		}
	})
}
