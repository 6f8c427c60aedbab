package natslog

import (
	"strings"
	"testing"
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
