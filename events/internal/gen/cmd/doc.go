// Command cmd writes events/payloads_json.go (package gen says what it
// holds). `go generate ./events` runs it, built without the file it writes
// (the build tag gen.BuildTag), so that it builds when the file is stale.
package main
