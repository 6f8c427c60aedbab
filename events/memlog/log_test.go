package memlog_test

import (
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/logtest"
	"github.com/callsheet/callsheet/events/memlog"
)

// TestConformance runs the events.Log suite on the in-memory log.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T) events.Log {
		l, err := memlog.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}
