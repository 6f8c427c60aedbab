// Package clients holds the callsheet client libraries in other languages,
// python/ (the callsheet package) and typescript/ (@callsheet/client), and
// the Go test that runs each one's own tests against a real node process
// (docs/clients.md). The Go client is package client at the module root.
package clients
