package testnode

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// JetStream is a JetStream client of the NATS server (or cluster: URLs
// joined by commas) at url, connected with the credentials file at creds (a
// node's NATSCredentials), on a connection of its own that the test's end
// closes.
func JetStream(t testing.TB, url, creds string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	c, err := cluster.LoadCredentials(filepath.Clean(creds))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cluster.Connect(url, "test", append([]nats.Option{c.Option()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
