package natslog_test

import (
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/logtest"
	"github.com/callsheet/callsheet/events/natslog"
)

// TestConformance runs the events.Log suite on the JetStream log, each test
// on its own embedded server, in both append modes.
func TestConformance(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		logtest.Run(t, func(t *testing.T) events.Log { return openLog(t, startServer(t), mode) })
	})
}
