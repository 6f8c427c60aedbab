package natslog

import "testing"

func FuzzDecodeMsg(f *testing.F) {
	f.Add([]byte(`{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}}`))
	f.Add([]byte(`[{"id":"a","tenant":"t","session":"s","seq":1,"type":"X","data":{}},{"id":"b","tenant":"t","session":"s","seq":2,"type":"X","data":{}}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := decodeMsg(b)
		if err == nil && len(evs) == 0 {
			t.Fatal("decoded no events without an error")
		}
	})
}
